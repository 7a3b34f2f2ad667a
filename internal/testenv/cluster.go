package testenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterReadyTimeout bounds cluster creation plus gossip convergence, which
// takes longer than a single server start, especially on a loaded machine.
const clusterReadyTimeout = 30 * time.Second

// clusterMasters is the number of masters of every cluster.
const clusterMasters = 3

// RedisClusterServer is a three-master Redis Cluster private to one test,
// without replicas unless RedisClusterWith asks for them. (It is not named
// RedisCluster because the constructor is.)
type RedisClusterServer struct {
	// Addrs are the nodes' "127.0.0.1:port" addresses.
	Addrs []string
	// Nodes are the individual servers, e.g. to Stop or Pause one node. A
	// node restarted with Start keeps its nodes.conf and rejoins with its
	// slots (but no data); call WaitOK before relying on the cluster again.
	Nodes []*RedisServer

	t testing.TB
}

// URL returns "redis-cluster://h1:p1,h2:p2,h3:p3".
func (c *RedisClusterServer) URL() string {
	return "redis-cluster://" + strings.Join(c.Addrs, ",")
}

// RedisCluster starts three cluster-enabled redis-server nodes, joins them
// with redis-cli --cluster create, and returns once every node reports
// cluster_state:ok with all 16384 slots assigned. The nodes are killed when
// the test ends. The test fails if redis-server or redis-cli is not on PATH.
func RedisCluster(t testing.TB) *RedisClusterServer {
	t.Helper()
	return RedisClusterWith(t, ClusterOptions{})
}

// ClusterOptions configure RedisClusterWith.
type ClusterOptions struct {
	// Replicas is the number of replicas of each of the three masters
	// (redis-cli --cluster create --cluster-replicas): with 1, six nodes,
	// and a master that stops is replaced by its replica after the node
	// timeout (2s) and an election.
	Replicas int
	// PartialCoverage sets cluster-require-full-coverage no: while some
	// slots have no master (a master died and its replica is not yet
	// promoted), the other masters keep serving their own slots. With
	// Redis' default (yes), every node answers CLUSTERDOWN for every key
	// in that interval.
	PartialCoverage bool
}

// RedisClusterWith is RedisCluster with options.
func RedisClusterWith(t testing.TB, opts ClusterOptions) *RedisClusterServer {
	t.Helper()
	skipShort(t, "a Redis Cluster")
	requireBinary(t, "redis-server", "redis-server")
	requireBinary(t, "redis-cli", "redis-tools")
	if opts.Replicas < 0 {
		t.Fatalf("testenv: ClusterOptions.Replicas must not be negative, got %d", opts.Replicas)
	}

	fullCoverage := "yes"
	if opts.PartialCoverage {
		fullCoverage = "no"
	}
	c := &RedisClusterServer{t: t}
	for range clusterMasters * (1 + opts.Replicas) {
		n := startRedis(t, func(dir string, port int) ([]string, error) {
			// The bus port defaults to port+10000, which is past 65535 for
			// most ephemeral ports, so choose it explicitly (--cluster-port
			// needs Redis 7.0+; redis-cli --cluster create honours it).
			bus, err := freePort()
			if err != nil {
				return nil, fmt.Errorf("no free cluster bus port: %v", err)
			}
			return []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "2000",
				"--cluster-port", strconv.Itoa(bus),
				// A replica syncs at once rather than after 5s, so
				// it can take over as soon as the cluster is up.
				"--repl-diskless-sync-delay", "0",
				"--cluster-require-full-coverage", fullCoverage,
			}, nil
		})
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: redis-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, out, c.logTails())
	}

	if err := c.waitOK(); err != nil {
		t.Fatalf("testenv: redis cluster %s: %v\nredis-cli output:\n%s\n%s", c.URL(), err, out, c.logTails())
	}
	// A replica that never synced cannot be promoted: return once every
	// replica's link to its master is up.
	if err := c.waitReplicasSynced(); err != nil {
		t.Fatalf("testenv: redis cluster %s: %v\n%s", c.URL(), err, c.logTails())
	}
	return c
}

func (c *RedisClusterServer) waitReplicasSynced() error {
	deadline := time.Now().Add(clusterReadyTimeout)
	for _, n := range c.Nodes {
		for {
			info, err := redisDo(n.Addr, time.Second, "INFO", "replication")
			if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("replica %s not synced with its master after %v: %v\n%s", n.Addr, clusterReadyTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// WaitOK waits until every running node reports cluster_state:ok with all
// slots assigned and served and three running nodes are masters, e.g. after
// restarting a node or until a replica has taken over from a stopped master, and fails the test if that takes
// longer than 30 seconds. Stopped nodes are not asked.
func (c *RedisClusterServer) WaitOK() {
	c.t.Helper()
	if err := c.waitOK(); err != nil {
		c.t.Fatalf("testenv: redis cluster %s: %v\n%s", c.URL(), err, c.logTails())
	}
}

// waitOK polls CLUSTER INFO on every node until all agree the cluster is up.
// redis-cli returns once the nodes' configs agree, but a node only reports
// ok after it has learned every other node's slots through gossip, and
// clients that connect earlier would see CLUSTERDOWN.
func (c *RedisClusterServer) waitOK() error {
	deadline := time.Now().Add(clusterReadyTimeout)
	for {
		err := c.checkOK()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", clusterReadyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *RedisClusterServer) checkOK() error {
	want := []string{
		"cluster_state:ok",
		"cluster_slots_assigned:16384",
		"cluster_slots_ok:16384",
		"cluster_known_nodes:" + strconv.Itoa(len(c.Nodes)),
	}
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		info, err := redisDo(n.Addr, time.Second, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %v", n.Addr, err)
		}
		fields := strings.Fields(info) // lines end in \r\n
		for _, w := range want {
			if !slices.Contains(fields, w) {
				return errors.New(n.Addr + " CLUSTER INFO lacks " + w + ":\n" + info)
			}
		}
	}
	// Right after a master stops, the others still report ok until the
	// node timeout passes: wait for a running master per slot range.
	masters := 0
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		role, err := redisDo(n.Addr, time.Second, "ROLE")
		if err != nil {
			return fmt.Errorf("ROLE on %s: %v", n.Addr, err)
		}
		if strings.HasPrefix(role, "master\n") {
			masters++
		}
	}
	if masters < clusterMasters {
		return fmt.Errorf("%d running masters, want %d", masters, clusterMasters)
	}
	return nil
}

func (c *RedisClusterServer) logTails() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		b.WriteString(logTail(n.logPath))
		b.WriteString("\n")
	}
	return b.String()
}

// Masters returns the running nodes that are masters now (ROLE), in the
// order of Nodes. After a failover the promoted replica is among them.
func (c *RedisClusterServer) Masters() []*RedisServer {
	c.t.Helper()
	var out []*RedisServer
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		role, err := redisDo(n.Addr, time.Second, "ROLE")
		if err != nil {
			c.t.Fatalf("testenv: ROLE on %s: %v", n.Addr, err)
		}
		if strings.HasPrefix(role, "master\n") {
			out = append(out, n)
		}
	}
	return out
}
