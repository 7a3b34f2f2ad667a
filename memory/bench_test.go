package memory_test

import (
	"sync"
	"testing"

	"github.com/sluicelabs/sluice/internal/storetest"
	"github.com/sluicelabs/sluice/memory"
)

// BenchmarkCheck: see storetest.BenchmarkCheck.
func BenchmarkCheck(b *testing.B) {
	store := memory.New(memory.Options{})
	defer store.Close()
	storetest.BenchmarkCheck(b, store)
}

// BenchmarkReferenceMutexCounter is the floor to read the numbers above
// against: a map of counters behind one mutex, with none of the algorithms.
func BenchmarkReferenceMutexCounter(b *testing.B) {
	var mu sync.Mutex
	counts := map[string]int64{}
	b.Run("parallel/hot", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				counts["hot"]++
				mu.Unlock()
			}
		})
	})
}
