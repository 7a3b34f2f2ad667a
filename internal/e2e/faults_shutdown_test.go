package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestFaultShutdownUnderLoad sends SIGTERM to sluice serve (--drain-period
// 1s) under load, with a slow check in flight whose body is still arriving:
// /readyz turns 503 first, while every check is still answered; no check
// sent during the drain period is refused; the slow check completes after
// the listener has closed; the process then exits.
func TestFaultShutdownUnderLoad(t *testing.T) {
	scenario(t)
	const drain = time.Second
	redis := testenv.Redis(t)
	// Redis is healthy here: a generous store deadline keeps a CPU-starved
	// machine (the race detector, a fresh process's first calls) from
	// opening the breaker and blurring what is measured.
	rig := startFaultRig(t, redis.URL(), testenv.Postgres(t), "--drain-period", drain.String(),
		"--shutdown-timeout", "10s", "--store-timeout", "500ms")
	l := rig.startLoad()

	// /readyz, polled throughout.
	type probe struct {
		at     time.Time // sent
		done   time.Time // answered
		status int
		err    error
	}
	var (
		mu     sync.Mutex
		probes []probe
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	readyClient := &http.Client{Timeout: 2 * time.Second}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := probe{at: time.Now()}
			resp, err := readyClient.Get(rig.in.url + "/readyz")
			if err != nil {
				p.err = err
			} else {
				p.status = resp.StatusCode
				resp.Body.Close()
			}
			p.done = time.Now()
			mu.Lock()
			probes = append(probes, p)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	})

	// The slow check: headers and half its body now, the rest after the
	// drain period, when the listener is closed.
	body := fmt.Sprintf(`{"route":"/closed/x","subject":%q}`, "slow")
	conn, err := net.Dial("tcp", rig.in.url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		rig.key, len(body), body[:len(body)/2])

	// Readiness answered before the signal, so a wrong 503 there would show.
	testenv.Eventually(t, 10*time.Second, "readiness probes before the signal", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(probes) >= 10
	})
	term := time.Now() // just before: what was answered before this saw no signal
	if err := rig.in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	// Past the drain period the listener closes; then the body arrives.
	testenv.Eventually(t, drain+10*time.Second, "the listener closes after the drain period", func() bool {
		c, err := net.Dial("tcp", rig.in.url[len("http://"):])
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if _, err := fmt.Fprint(conn, body[len(body)/2:]); err != nil {
		t.Fatalf("the slow check's connection was closed before its body arrived: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	slowDone := time.Now()
	if err != nil {
		t.Errorf("the slow check in flight got no answer: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the slow check in flight: %d, want 200", resp.StatusCode)
		}
		t.Logf("the slow check in flight answered %d %v after SIGTERM", resp.StatusCode, slowDone.Sub(term).Round(time.Millisecond))
	}

	select {
	case <-rig.in.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("sluice serve did not exit 10s after its last request")
	}
	exited := time.Now()
	samples := l.finish()
	close(stop)
	wg.Wait()
	t.Logf("sluice serve exited %v after SIGTERM", exited.Sub(term).Round(time.Millisecond))

	// /readyz: 200 before SIGTERM, 503 soon after, and 503 (or no
	// answer, once closed) from then on.
	var first503 time.Time
	for _, p := range probes {
		switch {
		case p.done.Before(term):
			if p.err != nil || p.status != http.StatusOK {
				t.Errorf("/readyz before SIGTERM: %d %v", p.status, p.err)
			}
		case p.err == nil && p.status == http.StatusServiceUnavailable:
			if first503.IsZero() {
				first503 = p.at
			}
		case p.err == nil && p.status == http.StatusOK:
			if !first503.IsZero() {
				t.Errorf("/readyz answered 200 again at +%v after turning 503", p.at.Sub(term).Round(time.Millisecond))
			}
		case p.err != nil && p.at.Before(term.Add(drain-50*time.Millisecond)):
			t.Errorf("/readyz refused during the drain period, at +%v: %v", p.at.Sub(term).Round(time.Millisecond), p.err)
		}
	}
	if first503.IsZero() {
		t.Fatal("/readyz never answered 503 after SIGTERM")
	}
	if d := first503.Sub(term); d > 200*time.Millisecond {
		t.Errorf("/readyz turned 503 only %v after SIGTERM", d.Round(time.Millisecond))
	}
	t.Logf("/readyz turned 503 %v after SIGTERM", max(first503.Sub(term), 0).Round(time.Millisecond))

	// Checks: every one sent before SIGTERM or during the drain period is
	// answered by Redis; after it, new connections may be refused.
	drainEnd := term.Add(drain - 50*time.Millisecond)
	var during, after, refusedAfter int
	var maxLatency time.Duration
	for _, s := range samples {
		if s.sent.After(drainEnd) {
			after++
			if s.err != nil {
				refusedAfter++
			}
			continue
		}
		if !s.sent.Before(term) {
			during++
		}
		if s.err != nil || !(s.storeAnswer() || s.shed()) {
			t.Errorf("check sent %v after SIGTERM (before the end of the drain period) not answered by Redis: %s", s.sent.Sub(term).Round(time.Millisecond), s)
			continue
		}
		maxLatency = max(maxLatency, s.latency())
	}
	if during == 0 {
		t.Error("no check was sent during the drain period")
	}
	if bound := 1500 * time.Millisecond; maxLatency > bound {
		t.Errorf("max latency %v, over the %v bound (store deadline 500ms)", maxLatency, bound)
	}
	t.Logf("%d checks answered during the drain period (max latency %v); %d sent after it, %d of them not answered (listener closed)",
		during, maxLatency.Round(time.Millisecond), after, refusedAfter)
}
