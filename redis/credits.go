package redis

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
)

var _ sluice.CreditStore = (*Store)(nil)

// TopUp raises or sets a credits balance, once per idempotency key, in one
// call of check.lua (topup_op): atomic with checks, refills applied first.
// The idempotency record sits beside the balance, under the same hash tag,
// its key hashed so that a caller's bytes cannot shape store keys. See
// sluice.CreditStore.
func (s *Store) TopUp(ctx context.Context, t sluice.TopUp) (sluice.TopUpResult, error) {
	if err := t.Validate(); err != nil {
		return sluice.TopUpResult{}, err
	}
	nowArg := ""
	tableMs := time.Now().UnixMilli()
	if !t.Now.IsZero() {
		tableMs = t.Now.UnixMilli()
		nowArg = strconv.FormatInt(tableMs, 10)
	}
	key := sluice.LimitKey(s.prefix, sluice.SubjectTag(t.Tenant, t.Rule, t.Subject), t.Limit)
	sum := sha256.Sum256([]byte(t.IdempotencyKey))
	idem := key + ":idem:" + base64.RawURLEncoding.EncodeToString(sum[:16])
	op, value := "a", t.Add
	if t.SetBalance {
		op, value = "s", t.Set
	}
	args := []string{"topup", nowArg, scriptAlgorithm(t.Limit), strconv.FormatInt(t.Limit.Refill.Amount, 10),
		string(t.Limit.AppendPeriodTable(nil, tableMs)), strconv.FormatInt(t.Limit.Refill.Max, 10), op,
		strconv.FormatInt(value, 10), strconv.FormatInt(sluice.IdempotencyTTL.Milliseconds(), 10)}
	reply, err := s.execScript(ctx, []string{key, idem}, args, true, topUpApplied)
	if err != nil {
		return sluice.TopUpResult{}, unavailable("top up", err)
	}
	if len(reply) != 2 {
		return sluice.TopUpResult{}, unavailable("top up", fmt.Errorf("script replied %d values", len(reply)))
	}
	var r [2]int64
	for i := range r {
		if r[i], err = replyInt(&reply[i]); err != nil {
			return sluice.TopUpResult{}, unavailable("top up", err)
		}
	}
	return sluice.TopUpResult{Balance: r[0], Applied: r[1] == 1}, nil
}

// topUpApplied reports whether a top-up's reply says it wrote: a repeated
// idempotency key changed nothing a failover could lose.
func topUpApplied(reply []rueidis.RedisMessage) bool {
	if len(reply) != 2 {
		return true
	}
	applied, err := replyInt(&reply[1])
	return err != nil || applied == 1
}
