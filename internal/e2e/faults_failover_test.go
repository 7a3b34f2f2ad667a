package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestFaultSentinelFailover (issue 30): a Sentinel failover after a
// partition, with and without --redis-replica-acks. Real processes: a
// master, its replica, three Sentinels (quorum 2) and two sluice serve
// instances on the redis-sentinel:// URL, and a gate in front of the master
// that the test controls. Sentinel gives every client the master's one
// address (the gate's), so the gate tells connections apart by source: the
// replica and the Sentinels connect from 127.0.0.2, the instances from
// 127.0.0.1. The partition cuts the 127.0.0.2 connections only: the master
// keeps taking the instances' counts while the Sentinels, no longer
// reaching it, promote the replica; the instances follow the promotion. The
// gate then heals, and the old master becomes a replica of the new one,
// dropping what it took alone.
//
// Every check is counted by the test, per subject (one hourly window: a
// subject's window is named by the answers' reset_after):
//
//   - acks=1: zero over-admission. A check the master could not replicate is
//     a store failure answered by the rule's failure mode (closed: 503), and
//     each subject is admitted at most its limit, and at least its limit
//     less the checks refused meanwhile (a write that reached the replica
//     while its acknowledgement came too late is refused yet counted).
//   - acks=0: the units the master admitted after the cut are lost with it,
//     and admitted again by the promoted replica. The loss is measured and
//     logged, and held to a loose bound: at most what the instances were
//     admitted from the cut to the heal (RELIABILITY.md, "Through a Redis
//     failover").
func TestFaultSentinelFailover(t *testing.T) {
	t.Run("acks=1", func(t *testing.T) { sentinelFailover(t, 1) })
	t.Run("acks=0", func(t *testing.T) { sentinelFailover(t, 0) })
}

const (
	failoverSubjects = 10
	failoverLimit    = 300
	failoverWorkers  = 3 // per instance
	failoverPause    = 10 * time.Millisecond
	// failoverSource is the address the replica and the Sentinels connect
	// from: the gate cuts theirs and passes the instances'.
	failoverSource = "127.0.0.2"
)

func sentinelFailover(t *testing.T, acks int) {
	scenario(t)
	master := testenv.Redis(t)
	gate := startSourceGate(t, master.Addr, failoverSource)
	// The replica and the Sentinels listen on 127.0.0.2 too, the address
	// they are seen from, and connect from it (protected mode would refuse
	// any loopback client but 127.0.0.1).
	from := []string{"--bind", failoverSource + " 127.0.0.1", "--bind-source-addr", failoverSource, "--protected-mode", "no"}
	// Its replicas are synced at once once it is promoted (Redis waits 5 s
	// for more replicas to share a diskless sync by default).
	replica := testenv.RedisReplicaOf(t, gate.addr(), append(from, "--repl-diskless-sync-delay", "0")...)
	var sentinels []string
	var sentinelDirs []string
	t.Cleanup(func() {
		if t.Failed() {
			for _, dir := range sentinelDirs {
				b, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
				t.Logf("sentinel log %s:\n%s", dir, b)
			}
		}
	})
	for range 3 {
		s := testenv.RedisSentinelWith(t, testenv.SentinelOptions{
			MasterName: "failover", MasterAddr: gate.addr(), Quorum: 2,
			DownAfter: time.Second, FailoverTimeout: 10 * time.Second,
			Config: []string{"bind " + failoverSource + " 127.0.0.1", "bind-source-addr " + failoverSource},
		})
		sentinels = append(sentinels, s.Addr)
		sentinelDirs = append(sentinelDirs, s.Dir)
	}
	// Let the Sentinels find each other and the replica before the cut.
	testenv.Eventually(t, 20*time.Second, "every Sentinel knows the replica and two other Sentinels", func() bool {
		for _, addr := range sentinels {
			if !sentinelSees(addr) {
				return false
			}
		}
		return true
	})

	dsn := testenv.Postgres(t)
	url := "redis-sentinel://failover@" + strings.Join(sentinels, ",") + "/0"
	var rigs []*faultRig
	for i := range 2 {
		extra := []string{"--redis-replica-acks", fmt.Sprint(acks)}
		if i == 0 {
			rigs = append(rigs, startFailoverRig(t, url, dsn, extra...))
			continue
		}
		addr := freeAddr(t)
		in := startServe(t, t.TempDir(), addr, nil, append([]string{"--addr", addr, "--redis", url, "--database", dsn, "--admin-token", adminToken}, extra...)...)
		rigs = append(rigs, &faultRig{t: t, in: in, key: rigs[0].key, client: rigs[0].client})
		waitForRule(t, in, rigs[0].key, "/closed/x", "closed")
	}

	l := &load{rig: rigs[0], stop: make(chan struct{})}
	for _, rig := range rigs {
		for w := range failoverWorkers {
			l.wg.Go(func() {
				for i := w; l.running(); i++ {
					l.add(rig.check("closed", fmt.Sprintf("s-%d", i%failoverSubjects)), false)
					time.Sleep(failoverPause)
				}
			})
		}
	}
	time.Sleep(time.Second)
	cut := time.Now()
	gate.cut(true)
	t.Logf("cut: %s", gate)
	promotedAt := awaitPromotion(t, sentinels[0], replica.Port)
	t.Logf("replica promoted %v after the cut", promotedAt.Sub(cut).Round(time.Millisecond))
	time.Sleep(time.Second)
	healed := time.Now()
	gate.cut(false)
	// The old master comes back as a replica of the new one, dropping what
	// it took alone: the Sentinels do it some 10 s after they reach it
	// again; the test does it at once. With acks=1 writes are acknowledged
	// again from then on.
	if _, err := master.Do("REPLICAOF", "127.0.0.1", fmt.Sprint(replica.Port)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the old master replicates the promoted one", func() bool {
		info, err := replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	t.Logf("old master a replica again %v after the heal", time.Since(healed).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	samples := l.finish()
	// Spend every subject to its limit on the new master, so the counts
	// below compare with the limit reached, not approached. Until the
	// breakers have let a probe through, checks get the policy's answer.
	spendBy := time.Now().Add(30 * time.Second)
	for i := range failoverSubjects {
		subject := fmt.Sprintf("s-%d", i)
		for n := 0; ; n++ {
			if time.Now().After(spendBy) {
				t.Fatalf("%s: no deny from the store after %d checks", subject, n)
			}
			s := rigs[n%2].check("closed", subject)
			samples = append(samples, s)
			if s.storeAnswer() && s.status == http.StatusTooManyRequests {
				break
			}
			if !s.storeAnswer() {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}

	type count struct{ allowed, refused, afterCut, overloaded int }
	counts := map[string]*count{}
	kinds := map[string]int{}
	windows := map[string]time.Time{}
	for _, s := range samples {
		c := counts[s.subject]
		if c == nil {
			c = &count{}
			counts[s.subject] = c
		}
		switch {
		case s.err != nil:
			t.Errorf("check failed: %s", s)
		case s.storeAnswer():
			kinds["store"]++
			if s.status == http.StatusOK {
				c.allowed++
				if !s.sent.Before(cut.Add(-200*time.Millisecond)) && s.sent.Before(healed) {
					c.afterCut++
				}
				// One hourly window: every allow names the same end.
				end := s.sent.Add(s.resetAfter).Truncate(time.Minute)
				if w, ok := windows[s.subject]; ok && w.Sub(end).Abs() > time.Minute {
					t.Skipf("%s crossed a window boundary (%v, %v): rerun", s.subject, w, end)
				}
				windows[s.subject] = end
			}
		case s.policyAnswer():
			kinds["policy"]++
			c.refused++
		case s.shed():
			kinds["shed"]++
			c.overloaded++
		default:
			t.Errorf("answer neither the store's nor the closed policy's: %s", s)
		}
	}
	t.Logf("%d checks: %v", len(samples), kinds)
	for _, s := range samples {
		if s.storeAnswer() && s.status == http.StatusOK && s.sent.After(healed) {
			t.Logf("first allow after the heal sent %v after it", s.sent.Sub(healed).Round(time.Millisecond))
			break
		}
	}
	over := 0
	for i := range failoverSubjects {
		subject := fmt.Sprintf("s-%d", i)
		c := counts[subject]
		extra := c.allowed - failoverLimit
		over += max(extra, 0)
		t.Logf("%s: admitted %d of %d (%d of them from the cut to the heal), refused %d, shed %d",
			subject, c.allowed, failoverLimit, c.afterCut, c.refused, c.overloaded)
		if acks > 0 {
			if c.allowed > failoverLimit {
				t.Errorf("%s: admitted %d, over its limit of %d with --redis-replica-acks %d", subject, c.allowed, failoverLimit, acks)
			}
			if c.allowed < failoverLimit-c.refused-c.overloaded {
				t.Errorf("%s: admitted %d, below its limit %d less the %d checks refused or shed", subject, c.allowed, failoverLimit, c.refused+c.overloaded)
			}
			continue
		}
		if extra > c.afterCut {
			t.Errorf("%s: over-admitted %d, more than the %d admitted from the cut to the heal", subject, extra, c.afterCut)
		}
	}
	t.Logf("acks=%d: %d units over-admitted across %d subjects (limit %d each)", acks, over, failoverSubjects, failoverLimit)
	if acks > 0 && kinds["policy"] == 0 {
		t.Errorf("no check was refused during the partition: the writes were not waited for")
	}
}

// startFailoverRig is startFaultRig for one fail-closed rule of
// failoverLimit per hour.
func startFailoverRig(t *testing.T, redisURL, dsn string, extra ...string) *faultRig {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"--addr", addr, "--redis", redisURL, "--database", dsn, "--admin-token", adminToken}, extra...)
	in := startServe(t, t.TempDir(), addr, nil, args...)
	key := setupTenant(in, adminToken, "acme")
	in.must(http.StatusCreated, "PUT", "/v1/tenants/acme/rules/closed", adminToken, faultRule("closed", failoverLimit))
	return &faultRig{t: t, in: in, key: key, client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}}
}

// sentinelSees reports whether the Sentinel at addr knows a replica of the
// master and two other Sentinels.
func sentinelSees(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "SENTINEL MASTER failover\r\n"); err != nil {
		return false
	}
	buf := make([]byte, 8192)
	n, _ := c.Read(buf)
	reply := string(buf[:n])
	return strings.Contains(reply, "num-slaves\r\n$1\r\n1\r\n") && strings.Contains(reply, "num-other-sentinels\r\n$1\r\n2\r\n")
}

// awaitPromotion waits until the Sentinel at addr names the replica on port
// as the master, and returns when it first did.
func awaitPromotion(t *testing.T, addr string, port int) time.Time {
	t.Helper()
	var at time.Time
	testenv.Eventually(t, 30*time.Second, "the Sentinels promote the replica", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := io.WriteString(c, "SENTINEL GET-MASTER-ADDR-BY-NAME failover\r\n"); err != nil {
			return false
		}
		buf := make([]byte, 512)
		n, _ := c.Read(buf)
		if strings.Contains(string(buf[:n]), fmt.Sprintf("\r\n%d\r\n", port)) {
			at = time.Now()
			return true
		}
		time.Sleep(20 * time.Millisecond)
		return false
	})
	return at
}

// sourceGate is a TCP proxy in front of a Redis that can cut the
// connections from one source address and pass the others.
type sourceGate struct {
	ln     net.Listener
	target string
	source string // the address whose connections cut cuts

	mu    sync.Mutex
	cuts  bool
	conns map[net.Conn]bool // true: from source
	wg    sync.WaitGroup
}

func startSourceGate(t *testing.T, target, source string) *sourceGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &sourceGate{ln: ln, target: target, source: source, conns: map[net.Conn]bool{}}
	g.wg.Go(g.accept)
	t.Cleanup(func() {
		ln.Close()
		g.mu.Lock()
		for c := range g.conns {
			reset(c)
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
	return g
}

func (g *sourceGate) addr() string { return g.ln.Addr().String() }

// String counts the connections open through the gate, by source.
func (g *sourceGate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := map[bool]int{}
	for _, fromSource := range g.conns {
		n[fromSource]++
	}
	return fmt.Sprintf("%d connections from %s, %d from elsewhere", n[true], g.source, n[false])
}

// cut resets the source's connections and refuses its new ones (on), or
// passes them again (off).
func (g *sourceGate) cut(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cuts = on
	if on {
		for c, fromSource := range g.conns {
			if fromSource {
				reset(c)
			}
		}
	}
}

func (g *sourceGate) accept() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		fromSource := host == g.source
		g.mu.Lock()
		if fromSource && g.cuts {
			g.mu.Unlock()
			reset(c)
			continue
		}
		g.conns[c] = fromSource
		g.mu.Unlock()
		g.wg.Go(func() { g.serve(c) })
	}
}

func (g *sourceGate) serve(c net.Conn) {
	defer func() {
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
		c.Close()
	}()
	up, err := net.DialTimeout("tcp", g.target, 5*time.Second)
	if err != nil {
		reset(c)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	reset(c)
	reset(up)
	<-done
}
