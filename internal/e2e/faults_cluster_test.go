package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestFaultClusterMasterLost kills one master of a 3-master, 3-replica
// Redis Cluster under load. Only that master's keys are affected: subjects
// whose counters live on the other masters keep being answered by Redis,
// and one of them is admitted exactly its limit across the whole scenario.
// The lost master's subjects get their rule's policy until its replica is
// promoted, then Redis' answers again.
//
// Replication is asynchronous: a count the lost master acknowledged but had
// not yet sent to its replica is lost with it, so the lost master's subjects
// are only logged, not held to their limit.
//
// With Redis' default cluster-require-full-coverage yes, every master
// answers CLUSTERDOWN for every key from when the cluster marks the master
// failed until its replica is promoted: the surviving masters' subjects then
// get their policy too for that interval (measured and logged, subtest
// full-coverage). With cluster-require-full-coverage no (subtest
// partial-coverage), they are answered by Redis throughout.
func TestFaultClusterMasterLost(t *testing.T) {
	t.Run("partial-coverage", func(t *testing.T) { clusterMasterLost(t, true) })
	t.Run("full-coverage", func(t *testing.T) { clusterMasterLost(t, false) })
}

func clusterMasterLost(t *testing.T, partial bool) {
	scenario(t)
	cluster := testenv.RedisClusterWith(t, testenv.ClusterOptions{Replicas: 1, PartialCoverage: partial})
	// A deadline above the default 50ms: a CPU-starved machine must not
	// time out calls to the surviving masters, which this scenario
	// requires to answer every check; a dead master fails at once anyway.
	rig := startFaultRig(t, cluster.URL(), testenv.Postgres(t), "--store-timeout", "250ms")
	masters := cluster.Masters()
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	victimMaster := masters[0]

	// Find, for every rule, a subject whose counters live on the master
	// to be lost and one on each other master: check a subject once and
	// see which master gained a key. These checks are samples too.
	var probes []sample
	victim := map[string]string{}
	survivors := map[string][]string{}
	for _, mode := range faultModes {
		found := map[*testenv.RedisServer]string{}
		for i := 0; len(found) < 3; i++ {
			if i == 100 {
				t.Fatalf("%s: 100 subjects did not cover the three masters: %v", mode, found)
			}
			subject := fmt.Sprintf("%s-%d", mode, i)
			before := dbsizes(t, masters)
			s := rig.check(mode, subject)
			probes = append(probes, s)
			if !s.storeAnswer() || !s.allowed {
				t.Fatalf("probe check: %s", s)
			}
			after := dbsizes(t, masters)
			for j, m := range masters {
				if after[j] > before[j] {
					if _, ok := found[m]; !ok {
						found[m] = subject
					}
				}
			}
		}
		victim[mode] = found[victimMaster]
		for _, m := range masters[1:] {
			survivors[mode] = append(survivors[mode], found[m])
		}
	}
	t.Logf("lost master %s; its subjects %v; subjects on the other masters %v", victimMaster.Addr, victim, survivors)

	l := rig.startLoad()
	for _, mode := range faultModes {
		l.every(mode, victim[mode], 100*time.Millisecond)
		for _, s := range survivors[mode] {
			// 20 admissions spread over the outage and the failover.
			l.every(mode, s, 200*time.Millisecond)
		}
	}
	time.Sleep(500 * time.Millisecond)

	victimMaster.Stop()
	killed := time.Now()
	cluster.WaitOK()
	promoted := time.Now()
	t.Logf("replica promoted %v after the master was killed", promoted.Sub(killed).Round(time.Millisecond))
	l.awaitRecovery(promoted)
	for _, mode := range faultModes {
		for _, s := range append([]string{victim[mode]}, survivors[mode]...) {
			l.exhaust(mode, s)
		}
	}
	l.exhaustHot()
	samples := append(probes, l.finish()...)
	verify(t, samples, fault{healed: promoted, newLifetime: killed})

	for _, mode := range faultModes {
		for _, subject := range survivors[mode] {
			admitted, policy := 0, 0
			var first, last time.Time
			for _, s := range samples {
				if s.mode != mode || s.subject != subject {
					continue
				}
				if s.shed() {
					continue // this process out of CPU, not Redis; counted by verify
				}
				if !s.storeAnswer() {
					if partial {
						t.Errorf("%s: a subject on a surviving master was not answered by Redis: %s", mode, s)
					}
					policy++
					if first.IsZero() {
						first = s.sent
					}
					last = s.done
				}
				if s.storeAnswer() && s.allowed {
					admitted++
				}
			}
			if admitted != faultLimit {
				t.Errorf("%s: subject %s on a surviving master admitted %d times by Redis, want exactly %d", mode, subject, admitted, faultLimit)
			}
			if policy == 0 {
				t.Logf("%s: subject %s on a surviving master: admitted %d by Redis (limit %d), every answer Redis'", mode, subject, admitted, faultLimit)
			} else {
				t.Logf("%s: subject %s on a surviving master: admitted %d by Redis (limit %d); %d policy answers (CLUSTERDOWN) from %v to %v after the kill",
					mode, subject, admitted, faultLimit, policy, first.Sub(killed).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond))
			}
		}

		var policy, admitted, degraded int
		var back time.Time
		for _, s := range samples {
			if s.mode != mode || s.subject != victim[mode] {
				continue
			}
			switch {
			case s.storeAnswer():
				if s.allowed {
					admitted++
				}
				if back.IsZero() && s.sent.After(killed) {
					back = s.sent
				}
			case s.policyAnswer():
				policy++
				if s.allowed {
					degraded++
				}
				back = time.Time{}
			}
		}
		if policy == 0 {
			t.Errorf("%s: subject %s on the lost master never got the policy's answer", mode, victim[mode])
		}
		if back.IsZero() {
			t.Errorf("%s: subject %s on the lost master was not answered by Redis again", mode, victim[mode])
			continue
		}
		if d := back.Sub(promoted); d > faultRecoveryBound {
			t.Errorf("%s: subject on the lost master answered by Redis again %v after the promotion, over the %v bound", mode, d.Round(time.Millisecond), faultRecoveryBound)
		}
		t.Logf("%s: subject %s on the lost master: %d policy answers (%d allowed, degraded); answered by Redis again %v after the kill, %v after the promotion; admitted %d by Redis (limit %d, not asserted)",
			mode, victim[mode], policy, degraded, back.Sub(killed).Round(time.Millisecond), max(back.Sub(promoted), 0).Round(time.Millisecond), admitted, faultLimit)
	}
}

// exhaust checks subject on mode's rule until Redis denies it.
func (l *load) exhaust(mode, subject string) {
	for range 2*faultLimit + 10 {
		s := l.rig.check(mode, subject)
		l.add(s, false)
		if s.storeAnswer() && s.status == http.StatusTooManyRequests {
			return
		}
	}
}

func dbsizes(t *testing.T, nodes []*testenv.RedisServer) []int {
	t.Helper()
	out := make([]int, len(nodes))
	for i, n := range nodes {
		r, err := n.Do("DBSIZE")
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", n.Addr, err)
		}
		out[i], _ = strconv.Atoi(r)
	}
	return out
}
