package middleware

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice/client"
)

// Remote mode's leases (Options.RemoteLease): requests of cost 1 are decided
// in this process from units leased from the service, one
// client.LeasedLimiter per route and subject, so there is no call per
// request while units are in hand. A key idle for remoteLeaseIdle gives its
// units back; past maxRemoteLeasedKeys keys, new ones are checked directly.

const (
	maxRemoteLeasedKeys = 10_000
	remoteLeaseIdle     = 250 * time.Millisecond
	remoteReturnTimeout = time.Second
)

type remoteLeaseKey struct{ route, subject string }

type remoteLease struct {
	lim     *client.LeasedLimiter
	lastUse atomic.Int64 // unix ns
	// direct: the service said the rule does not lease; check directly.
	direct atomic.Bool
}

type remoteLeases struct {
	c    *client.Client
	opts client.LeaseOptions

	mu      sync.Mutex
	keys    map[remoteLeaseKey]*remoteLease
	stop    chan struct{}
	done    chan struct{}
	started bool
	closed  bool
}

func newRemoteLeases(c *client.Client, opts client.LeaseOptions) *remoteLeases {
	return &remoteLeases{c: c, opts: opts, keys: map[remoteLeaseKey]*remoteLease{}}
}

// get returns the lease of route and subject, nil when the key is to be
// checked directly (too many keys, closed, or a rule that does not lease).
func (rl *remoteLeases) get(route, subject string) *remoteLease {
	k := remoteLeaseKey{route, subject}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	e := rl.keys[k]
	if e == nil {
		if rl.closed || len(rl.keys) >= maxRemoteLeasedKeys {
			return nil
		}
		e = &remoteLease{lim: rl.c.NewLeasedLimiter(route, subject, rl.opts)}
		rl.keys[k] = e
		if !rl.started {
			rl.started = true
			rl.stop, rl.done = make(chan struct{}), make(chan struct{})
			go rl.sweep()
		}
	}
	if e.direct.Load() {
		return nil
	}
	e.lastUse.Store(time.Now().UnixNano())
	return e
}

// allow decides one request from e's lease. ok is false when the rule does
// not lease, or the lease was swept meanwhile: the caller checks directly.
func (e *remoteLease) allow(ctx context.Context) (res client.Result, ok bool, err error) {
	res, err = e.lim.Allow(ctx)
	if errors.Is(err, client.ErrLimiterClosed) {
		// Swept as idle while this request waited for it: check directly.
		return res, false, nil
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.StatusCode == http.StatusConflict && ce.Code == "rule_not_leased" {
		e.direct.Store(true)
		return res, false, nil
	}
	return res, true, err
}

// sweep returns the units of idle keys until stop is closed.
func (rl *remoteLeases) sweep() {
	defer close(rl.done)
	tick := time.NewTicker(remoteLeaseIdle / 2)
	defer tick.Stop()
	for {
		select {
		case <-rl.stop:
			return
		case <-tick.C:
		}
		idleSince := time.Now().Add(-remoteLeaseIdle).UnixNano()
		var idle []*remoteLease
		rl.mu.Lock()
		for k, e := range rl.keys {
			if e.lastUse.Load() < idleSince {
				delete(rl.keys, k)
				idle = append(idle, e)
			}
		}
		rl.mu.Unlock()
		rl.closeAll(idle)
	}
}

func (rl *remoteLeases) closeAll(leases []*remoteLease) {
	for _, e := range leases {
		ctx, cancel := context.WithTimeout(context.Background(), remoteReturnTimeout)
		// Best effort: units not returned stay consumed, never admitted.
		_ = e.lim.Close(ctx)
		cancel()
	}
}

// close stops the sweeper and returns every key's units.
func (rl *remoteLeases) close() {
	rl.mu.Lock()
	rl.closed = true
	started := rl.started
	var all []*remoteLease
	for k, e := range rl.keys {
		delete(rl.keys, k)
		all = append(all, e)
	}
	rl.mu.Unlock()
	if started {
		close(rl.stop)
		<-rl.done
	}
	rl.closeAll(all)
}
