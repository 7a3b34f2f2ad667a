package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
)

// Holds (see the root package's holds.go): a concurrency limit's leases are
// a sorted set at the limit's key, scored by expiry and pruned by the script
// itself; a hold's record is a hash beside its subject's counters, under the
// same hash tag, naming what each limit took so that settling is exact.
// Settle, release and extend run the same script as checks (check.lua,
// hold_op), so they share its algorithms and its atomicity.

var _ sluice.Holder = (*Store)(nil)

// withHold adds to a check's call what taking a hold needs: the record's key
// and the hold's arguments (see check.lua).
func (s *Store) withHold(c scriptCall, req sluice.Request) (scriptCall, *sluice.Hold) {
	id := sluice.NewHoldID(req.Tenant, req.Rule, req.Subject)
	tag, nonce, _ := sluice.SplitHoldID(id)
	ttl := req.HoldTTLOf()
	reserve := "0"
	if req.Reserve {
		reserve = "1"
	}
	keys := append(c.keys[:len(c.keys):len(c.keys)], sluice.HoldKey(s.prefix, tag, nonce))
	args := append(c.args[:len(c.args):len(c.args)], reserve, strconv.FormatInt(ttl.Milliseconds(), 10), nonce,
		req.Tenant, req.Rule, req.Subject, "H")
	return scriptCall{keys: keys, args: args}, &sluice.Hold{ID: id, ExpiresIn: ttl}
}

// Hold settles, releases or extends a hold in one script call. See
// sluice.Holder.
func (s *Store) Hold(ctx context.Context, op sluice.HoldOp) (sluice.HoldResult, error) {
	if err := op.Validate(); err != nil {
		return sluice.HoldResult{}, err
	}
	tag, nonce, _ := sluice.SplitHoldID(op.ID)
	now := ""
	if !op.Now.IsZero() {
		now = strconv.FormatInt(op.Now.UnixMilli(), 10)
	}
	action := map[sluice.HoldAction]string{sluice.HoldSettle: "s", sluice.HoldRelease: "r", sluice.HoldExtend: "x"}[op.Action]
	keys := []string{sluice.HoldKey(s.prefix, tag, nonce)}
	args := []string{"hold", now, action, strconv.FormatInt(op.Cost, 10), op.Tenant, nonce}
	if op.Action == sluice.HoldSettle && op.Limits != nil {
		var err error
		if args, err = s.currentLimitArgs(ctx, op, keys[0], tag, args); err != nil {
			return sluice.HoldResult{}, err
		}
	}
	reply, err := s.execScript(ctx, keys, args, true, holdChanged)
	if err != nil {
		return sluice.HoldResult{}, unavailable("hold", err)
	}
	if len(reply) == 0 {
		return sluice.HoldResult{}, unavailable("hold", fmt.Errorf("script replied nothing"))
	}
	status, err := reply[0].ToString()
	if err != nil {
		return sluice.HoldResult{}, unavailable("hold", err)
	}
	if status == "too_large" && len(reply) == 3 {
		key, _ := reply[1].ToString()
		capacity, _ := replyInt(&reply[2])
		return sluice.HoldResult{}, sluice.SettleCost([]sluice.Limit{{Name: limitName(key), Capacity: capacity}}, op.Cost)
	}
	if len(reply) != 6 {
		return sluice.HoldResult{}, unavailable("hold", fmt.Errorf("script replied %d values", len(reply)))
	}
	res := sluice.HoldResult{Status: sluice.HoldStatus(status)}
	res.Rule, _ = reply[1].ToString()
	res.Subject, _ = reply[2].ToString()
	var n [3]int64
	for i := range n {
		if n[i], err = replyInt(&reply[3+i]); err != nil {
			return sluice.HoldResult{}, unavailable("hold", err)
		}
	}
	res.ExpiresIn, res.LeasesFreed, res.Refunded = time.Duration(n[0])*time.Millisecond, n[1], n[2] == 1
	return res, nil
}

// holdChanged reports whether a hold operation's reply says it changed
// something: a hold unknown, already finished or expired, or a settle
// refused as too large, changed nothing.
func holdChanged(reply []rueidis.RedisMessage) bool {
	if len(reply) == 0 {
		return true
	}
	status, err := reply[0].ToString()
	switch {
	case err != nil:
		return true
	case status == "too_large", status == "too_many", sluice.HoldStatus(status) == sluice.HoldUnknown,
		sluice.HoldStatus(status) == sluice.HoldFinished, sluice.HoldStatus(status) == sluice.HoldExpired:
		return false
	}
	return true
}

// currentLimitArgs appends to a settle's args the current limits of the
// hold's rule (see sluice.HoldOp.Limits), keyed as a check keys them. The
// rule is read from the record first: one more round trip, for settles
// only, since the script cannot ask the caller.
func (s *Store) currentLimitArgs(ctx context.Context, op sluice.HoldOp, rec, tag string, args []string) ([]string, error) {
	f, err := s.client.Do(ctx, s.client.B().Hmget().Key(rec).Field("t", "r").Build()).ToArray()
	if err != nil {
		return nil, unavailable("hold", err)
	}
	if len(f) != 2 {
		return args, nil
	}
	tenant, _ := f[0].ToString()
	rule, err := f[1].ToString()
	if err != nil || tenant != op.Tenant {
		return args, nil // no such hold of this tenant: the script says so
	}
	nowMs := op.Now.UnixMilli()
	if op.Now.IsZero() {
		nowMs = time.Now().UnixMilli()
	}
	for _, l := range op.Limits(rule) {
		if l.Validate() != nil {
			continue
		}
		key := sluice.LimitKey(s.prefix, tag, l)
		capacity := strconv.FormatInt(l.Capacity, 10)
		if l.Algorithm == sluice.AlgorithmCredits || l.Calendar != "" {
			if l.Algorithm == sluice.AlgorithmCredits {
				capacity = strconv.FormatInt(l.Refill.Amount, 10)
			}
			args = append(args, key, scriptAlgorithm(l), capacity, string(l.AppendPeriodTable(nil, nowMs)),
				strconv.FormatInt(l.Refill.Max, 10))
			continue
		}
		switch l.Algorithm {
		case sluice.AlgorithmTokenBucket:
			tokens, interval := l.RefillRate()
			args = append(args, key, "t", capacity, strconv.FormatInt(tokens, 10), strconv.FormatInt(interval, 10))
		case sluice.AlgorithmSlidingWindow:
			args = append(args, key, "s", capacity, strconv.FormatInt(l.Window.Milliseconds(), 10), "0")
		case sluice.AlgorithmFixedWindow:
			args = append(args, key, "f", capacity, strconv.FormatInt(l.Window.Milliseconds(), 10), "0")
		}
	}
	return args, nil
}

// limitName reads the limit's name out of its key (see sluice.Keys).
func limitName(key string) string {
	if i := strings.Index(key, "}:"); i >= 0 {
		name, _, _ := strings.Cut(key[i+2:], ":")
		return name
	}
	return key
}

// ShardOfTag is the master node holding the counters of a subject tag (a
// hold id's first part): see Shard.
func (s *Store) ShardOfTag(tag string) int {
	m := s.slots.Load()
	if m == nil {
		return 0
	}
	return int(m.owner[keySlot([]byte(tag))])
}
