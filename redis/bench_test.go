package redis_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// BenchmarkCheck runs storetest.BenchmarkCheck on a private local
// redis-server: one script call per check, pipelined by rueidis over shared
// connections when parallel.
func BenchmarkCheck(b *testing.B) {
	srv := testenv.Redis(b)
	store, err := sluiceredis.Open(srv.URL(), sluiceredis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	storetest.BenchmarkCheck(b, store)

	// The reference in the same run: the cheapest possible write round trip,
	// a bare INCR on the same server and client library.
	opt, _ := sluiceredis.ParseURL(srv.URL())
	client, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	incr := func(b *testing.B) {
		if err := client.Do(ctx, client.B().Incr().Key("ref").Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("reference-incr/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			incr(b)
		}
	})
	b.Run("reference-incr/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				incr(b)
			}
		})
	})
	b.Run("reference-incr/parallel64", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				incr(b)
			}
		})
	})
}
