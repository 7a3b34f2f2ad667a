package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/checkapi"
)

// Readiness (GET /readyz) answers one question: can this instance answer
// checks as its rules say? It can when it holds a catalog snapshot (always,
// once New returned) and either the store answers or every rule's failure
// mode covers the store's absence (open or local). The catalog is not part
// of it: checks never touch the database, and a database blip must not drain
// the whole fleet. How old the served snapshot may be is reported beside it
// (catalog, snapshot_age_seconds) for monitoring to judge.
//
// The answer is computed at most once per readyCacheTTL, so however often
// probes come, this instance sends the store at most one PING and the catalog
// at most one version query per interval.
const (
	readyCacheTTL = time.Second
	// readyProbeTimeout bounds the store ping and the catalog query of one
	// computation, which run side by side: well inside a probe's timeout
	// (1 s by default in Kubernetes).
	readyProbeTimeout = 500 * time.Millisecond
)

// readyCache holds the last readiness answer.
type readyCache struct {
	mu     sync.Mutex
	at     time.Time
	status int
	body   any
}

// readyBody is the answer of a ready instance.
type readyBody struct {
	Status string `json:"status"` // "ready"
	// Store is "ok", or when every rule's failure mode covers its absence
	// "unavailable" (it stopped answering) or "connecting" (it has not
	// connected since this instance started, and is being connected to).
	Store string `json:"store"`
	// Catalog is "current" when the catalog answered and the snapshot
	// served is its latest, "stale" otherwise.
	Catalog string `json:"catalog"`
	// SnapshotVersion is the catalog version served.
	SnapshotVersion int64 `json:"snapshot_version"`
	// SnapshotAgeSeconds is how long since the served snapshot was last
	// known to be the catalog's current one.
	SnapshotAgeSeconds float64 `json:"snapshot_age_seconds"`
	// CatalogWrites is "ok" when the catalog's last write probe passed,
	// "read_only" when the database refused it (or a change) because it
	// cannot write, "unknown" before the first probe or when the probe
	// could not reach the database. Checks do not write: the instance
	// stays ready; admin changes answer 503 catalog_unavailable meanwhile.
	CatalogWrites string `json:"catalog_writes"`
}

// What the catalog's write probe found (API.writes).
const (
	writesUnknown int32 = iota
	writesOK
	writesReadOnly
)

var writesNames = [...]string{writesUnknown: "unknown", writesOK: "ok", writesReadOnly: "read_only"}

// DefaultWriteProbeInterval is how often the catalog is asked whether it
// takes writes when Options.WriteProbeInterval is 0: often enough for an
// alert, rarely enough that the probe's moment of write lock costs nothing.
const DefaultWriteProbeInterval = 15 * time.Second

// writeProber is a catalog that can say whether it takes writes without
// making one (both SQL catalogs can).
type writeProber interface {
	CheckWritable(ctx context.Context) error
}

// probeWrites asks the catalog whether it takes writes at once and then
// every writeProbeInterval until ctx ends, never per request, and logs when
// the answer turns.
func (a *API) probeWrites(ctx context.Context) {
	p, ok := a.catalog.(writeProber)
	if !ok {
		return
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		probeCtx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
		err := p.CheckWritable(probeCtx)
		cancel()
		switch {
		case err == nil:
			a.noteWrites(writesOK, nil)
		case errors.Is(err, sluice.ErrCatalogReadOnly):
			a.noteWrites(writesReadOnly, err)
		case ctx.Err() == nil:
			// Unreachable, or slow: the catalog field of /readyz says so.
			a.noteWrites(writesUnknown, err)
		}
		timer.Reset(a.writeProbeInterval)
	}
}

// noteWrites records what a probe (or a refused change) found, and logs a
// turn to or from read-only once.
func (a *API) noteWrites(now int32, err error) {
	was := a.writes.Swap(now)
	switch {
	case now == writesReadOnly && was != writesReadOnly:
		a.log.Warn("the catalog database is read-only: admin changes answer 503 catalog_unavailable until it can write again; checks are still answered", "error", err)
	case now == writesOK && was == writesReadOnly:
		a.log.Info("the catalog database takes writes again")
	}
}

// confirm records that the served snapshot is current now.
func (a *API) confirm() { a.confirmedAt.Store(time.Now().UnixNano()) }

// Drain makes /readyz answer 503 from now on, so load balancers stop
// sending this instance new requests while it finishes the ones in flight
// (call it on SIGTERM, before http.Server.Shutdown). Checks are still
// answered.
func (a *API) Drain() { a.draining.Store(true) }

func (a *API) handleReady(w http.ResponseWriter, r *http.Request) {
	if a.draining.Load() {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "draining", "This instance is shutting down; send requests to another.")
		return
	}
	c := &a.ready
	c.mu.Lock()
	if c.body == nil || time.Since(c.at) >= readyCacheTTL {
		c.status, c.body = a.readiness(r.Context())
		c.at = time.Now()
	}
	status, body := c.status, c.body
	c.mu.Unlock()
	if status != http.StatusOK {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// readiness computes the answer of /readyz.
func (a *API) readiness(ctx context.Context) (int, any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyProbeTimeout)
	defer cancel()
	st := a.state.Load()

	var storeErr, catalogErr error
	var version int64
	var wg sync.WaitGroup
	if a.storePing != nil {
		wg.Go(func() { storeErr = a.storePing(ctx) })
	}
	wg.Go(func() { version, catalogErr = a.catalog.Version(ctx) })
	wg.Wait()

	body := readyBody{Status: "ready", Store: "ok", Catalog: "stale", SnapshotVersion: st.snap.Version}
	switch {
	case catalogErr != nil:
		a.log.Warn("the catalog database does not answer; serving the last snapshot", "error", catalogErr)
	case version <= st.snap.Version:
		a.confirm()
		body.Catalog = "current"
	}
	body.SnapshotAgeSeconds = time.Since(time.Unix(0, a.confirmedAt.Load())).Seconds()
	body.CatalogWrites = writesNames[a.writes.Load()]

	if storeErr != nil {
		// /readyz needs no credentials: the answer counts the rules, the
		// log names them.
		state, says := "unavailable", "does not answer"
		if errors.Is(storeErr, sluice.ErrStoreConnecting) {
			state, says = "connecting", "has not connected yet (this instance keeps trying)"
		}
		if closed := failClosedRules(st); len(closed) > 0 {
			a.log.Warn("not ready: the rate-limit store "+says+" and some rules fail closed", "error", storeErr, "rules", closed[:min(len(closed), 10)], "count", len(closed))
			return http.StatusServiceUnavailable, checkapi.ErrorBody{Error: checkapi.ErrorDetail{Code: "store_unavailable", Message: fmt.Sprintf(
				"The rate-limit store %s and %d of this instance's rules fail closed.", says, len(closed))}}
		}
		a.log.Warn("the rate-limit store "+says+"; every rule fails open or local", "error", storeErr)
		body.Store = state
	}
	return http.StatusOK, body
}

// failClosedRules lists the rules ("tenant/rule") that answer 503 while the
// store is down.
func failClosedRules(st *state) []string {
	var out []string
	for id, r := range st.rules {
		if r.check.Mode == sluice.FailClosed {
			out = append(out, id.tenant+"/"+id.name)
		}
	}
	sort.Strings(out)
	return out
}
