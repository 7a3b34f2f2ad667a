package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// faultLength is how long each Redis fault lasts: long enough for the
// breaker to open (5 failures) and to probe (1s) while the fault lasts.
const faultLength = 2 * time.Second

// TestFaultRedisPaused freezes Redis with SIGSTOP (a hung server: TCP still
// accepts, nothing answers) and continues it with SIGCONT.
func TestFaultRedisPaused(t *testing.T) {
	scenario(t)
	redis := testenv.Redis(t)
	rig := startFaultRig(t, redis.URL(), testenv.Postgres(t))
	l := rig.startLoad()
	time.Sleep(500 * time.Millisecond)

	redis.Pause()
	var f fault
	f.start = time.Now()
	readyDuringFault(t, rig)
	time.Sleep(time.Until(f.start.Add(faultLength)))
	f.end = time.Now()
	redis.Resume()
	f.healed = time.Now()
	l.awaitRecovery(f.healed)
	l.exhaustHot()
	verify(t, l.finish(), f)
	rig.in.must(http.StatusOK, "GET", "/readyz", "", nil)
}

// TestFaultRedisKilled kills Redis with SIGKILL and starts a new, empty one
// on the same port. This Redis keeps nothing on disk, as is usual for a rate
// limiter's: a restart loses every counter, so a subject may be admitted its
// limit again by the new process. No over-admission is therefore asserted
// per Redis lifetime.
func TestFaultRedisKilled(t *testing.T) {
	scenario(t)
	redis := testenv.Redis(t)
	rig := startFaultRig(t, redis.URL(), testenv.Postgres(t))
	l := rig.startLoad()
	time.Sleep(500 * time.Millisecond)

	redis.Stop()
	var f fault
	f.start = time.Now()
	readyDuringFault(t, rig)
	time.Sleep(time.Until(f.start.Add(faultLength)))
	f.end = time.Now()
	f.newLifetime = f.end
	redis.Start()
	f.healed = time.Now()
	l.awaitRecovery(f.healed)
	l.exhaustHot()
	verify(t, l.finish(), f)
	rig.in.must(http.StatusOK, "GET", "/readyz", "", nil)
}

// TestFaultRedisScriptFlush empties Redis' script cache again and again
// under load, as a failover to a replica or a restart would: the NOSCRIPT
// that follows is recovered inside the store call, so every check is still
// answered by Redis, with no error and nothing degraded.
//
// A NOSCRIPT that escaped would fail the check at once, whatever the
// deadline; the deadline is raised to 500ms here only so that a CPU-starved
// machine (a 2-core CI runner with other test binaries) missing the default
// 50ms cannot open the breaker and be mistaken for one.
func TestFaultRedisScriptFlush(t *testing.T) {
	scenario(t)
	redis := testenv.Redis(t)
	rig := startFaultRig(t, redis.URL(), testenv.Postgres(t), "--store-timeout", "500ms")
	l := rig.startLoad()
	flushes := 0
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		redis.FlushScripts()
		flushes++
	}
	l.exhaustHot()
	verify(t, l.finish(), fault{storeOnly: true, latencyBound: 1500 * time.Millisecond})
	t.Logf("%d SCRIPT FLUSH under load", flushes)
}

// TestFaultRedisClientPause pauses Redis' writers with CLIENT PAUSE 2000
// WRITE: Redis stays up and answers PING, but holds every script (EVALSHA
// counts as a write) for two seconds. Checks during the pause get their
// rule's policy within the store deadline; after it, Redis' answers.
func TestFaultRedisClientPause(t *testing.T) {
	scenario(t)
	redis := testenv.Redis(t)
	rig := startFaultRig(t, redis.URL(), testenv.Postgres(t))
	l := rig.startLoad()
	time.Sleep(500 * time.Millisecond)

	if _, err := redis.Do("CLIENT", "PAUSE", "2000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	var f fault
	// The pause began before the reply reached us, and ends 2s after it
	// began: [start, start+1.9s] is certainly inside it.
	f.start = time.Now()
	f.end = f.start.Add(1900 * time.Millisecond)
	f.healed = f.start.Add(2 * time.Second)
	time.Sleep(time.Until(f.healed))
	l.awaitRecovery(f.healed)
	l.exhaustHot()
	verify(t, l.finish(), f)
}

// readyDuringFault logs /readyz during a Redis outage: the tenant has a
// fail-closed rule, so this instance cannot answer every check as its rules
// say and must not be ready.
func readyDuringFault(t *testing.T, rig *faultRig) {
	t.Helper()
	start := time.Now()
	r := rig.in.do("GET", "/readyz", "", nil)
	t.Logf("/readyz during the fault: %d %s in %v", r.status, r.errorCode(), time.Since(start).Round(time.Millisecond))
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the fault: %d %s, want 503 (a rule fails closed)", r.status, r.raw)
	}
}
