package deploy

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/internal/testenv"
	sluiceredis "github.com/sluicelabs/sluice/redis"
)

// TestSentinelExample runs examples/sentinel's topology with real processes:
// the master and the replica with the compose file's redis-server
// arguments, three Sentinels with its sentinel.conf, and a Sluice store
// opened as its sluice services' flags say (the Sentinel URL, the replica
// acks). Compose's host names become loopback addresses; everything else is
// the files' own, so an option redis-server or Sentinel refuses, a Sentinel
// URL that names other services, or acks the replica cannot give fail here.
func TestSentinelExample(t *testing.T) {
	dir := filepath.Join(root, "examples", "sentinel")
	var c struct {
		Services map[string]struct {
			Command    []string `yaml:"command"`
			Entrypoint []string `yaml:"entrypoint"`
			Volumes    []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	decodeYAML(t, filepath.Join(dir, "docker-compose.yml"), "", "", &c)
	redisArgs := func(service string) []string {
		cmd := c.Services[service].Command
		if len(cmd) == 0 || cmd[0] != "redis-server" {
			t.Fatalf("service %s runs %v, want redis-server", service, cmd)
		}
		return cmd[1:]
	}
	// Announced names and the replica's master are compose's network; the
	// test's processes are on loopback.
	local := func(args []string) (rest []string, replicaOf string) {
		for i := 0; i < len(args); i++ {
			switch args[i] {
			case "--replica-announce-ip":
				i++
			case "--replicaof":
				replicaOf = args[i+1] + ":" + args[i+2]
				i += 2
			default:
				rest = append(rest, args[i])
			}
		}
		return rest, replicaOf
	}
	masterArgs, _ := local(redisArgs("redis-master"))
	master := testenv.RedisWith(t, masterArgs...)
	// The settings that bound an isolated master's writes are in force.
	for _, setting := range []string{"min-replicas-to-write", "min-replicas-max-lag"} {
		i := slices.Index(masterArgs, "--"+setting)
		if i < 0 || i+1 >= len(masterArgs) || masterArgs[i+1] == "0" {
			t.Fatalf("the master does not set --%s: %v", setting, masterArgs)
		}
		if v, err := master.Do("CONFIG", "GET", setting); err != nil || v != setting+"\n"+masterArgs[i+1] {
			t.Errorf("the master's %s is %q (%v), want %s", setting, v, err, masterArgs[i+1])
		}
	}
	replicaArgs, replicaOf := local(redisArgs("redis-replica"))
	if replicaOf != "redis-master:6379" {
		t.Fatalf("the replica replicates %q, want redis-master:6379", replicaOf)
	}
	replica := testenv.RedisReplicaOf(t, master.Addr, replicaArgs...)

	// sentinel.conf, as each Sentinel service copies it.
	const confPath = "/etc/redis/sentinel.conf"
	sentinel := c.Services["sentinel-1"]
	conf := ""
	for _, v := range sentinel.Volumes {
		if src, dst, ok := strings.Cut(strings.TrimSuffix(v, ":ro"), ":"); ok && dst == confPath {
			conf = filepath.Join(dir, src)
		}
	}
	if conf == "" || !strings.Contains(strings.Join(sentinel.Entrypoint, " "), "cp "+confPath+" ") {
		t.Fatalf("sentinel-1 does not copy a mounted %s: %v %v", confPath, sentinel.Entrypoint, sentinel.Volumes)
	}
	opts := testenv.SentinelOptions{MasterAddr: master.Addr}
	f, err := os.Open(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0 || strings.HasPrefix(fields[0], "#"):
		case fields[0] == "port":
		case len(fields) == 6 && fields[1] == "monitor":
			if fields[3]+":"+fields[4] != "redis-master:6379" {
				t.Fatalf("sentinel.conf monitors %s:%s, want redis-master:6379", fields[3], fields[4])
			}
			opts.MasterName = fields[2]
			if opts.Quorum, err = strconv.Atoi(fields[5]); err != nil {
				t.Fatal(err)
			}
		case len(fields) >= 2 && slices.Contains([]string{"resolve-hostnames", "announce-hostnames"}, fields[1]):
			opts.Config = append(opts.Config, sc.Text())
		default:
			opts.MasterConfig = append(opts.MasterConfig, sc.Text())
		}
	}
	var sentinels []*testenv.RedisServer
	for i := 1; i <= 3; i++ {
		if _, ok := c.Services["sentinel-"+strconv.Itoa(i)]; !ok {
			t.Fatalf("no service sentinel-%d", i)
		}
		sentinels = append(sentinels, testenv.RedisSentinelWith(t, opts))
	}

	for _, service := range []string{"sluice-1", "sluice-2"} {
		cmd := c.Services[service].Command
		rawURL, _ := flagValue(cmd, "redis")
		acksFlag, _ := flagValue(cmd, "redis-replica-acks")
		acks, err := strconv.Atoi(acksFlag)
		if err != nil || acks < 1 {
			t.Fatalf("%s: --redis-replica-acks=%q, want replicated writes", service, acksFlag)
		}
		u, err := url.Parse(rawURL)
		if err != nil || u.Scheme != "redis-sentinel" || u.User.Username() != opts.MasterName {
			t.Fatalf("%s: --redis=%s, want the Sentinel URL of master set %q", service, rawURL, opts.MasterName)
		}
		var hosts []string
		for i, h := range strings.Split(u.Host, ",") {
			if h != "sentinel-"+strconv.Itoa(i+1)+":26379" {
				t.Fatalf("%s: --redis names %s, want the compose Sentinels on 26379", service, h)
			}
			hosts = append(hosts, sentinels[i].Addr)
		}
		u.Host = strings.Join(hosts, ",")
		store, err := sluiceredis.Open(u.String(), sluiceredis.Options{ReplicaAcks: acks, ReplicaAckTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", service, err)
		}
		defer store.Close()
		limits := []sluice.Limit{sluice.FixedWindow(10, time.Hour).Named("hourly")}
		d, err := store.Check(context.Background(), sluice.Request{Tenant: "t", Rule: "r", Subject: service, Limits: limits, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("%s: a check through the example's Sentinels: %+v, %v", service, d, err)
		}
	}
	// Both admissions were acknowledged by the replica before they were
	// allowed, so it holds them now.
	if keys, err := replica.Do("DBSIZE"); err != nil || strings.TrimSpace(keys) != "2" {
		t.Errorf("the replica holds %q keys (%v), want the 2 counters", keys, err)
	}
}
