package memory

import (
	"context"
	"crypto/sha256"
	"encoding/base64"

	"github.com/sluicelabs/sluice"
)

var _ sluice.CreditStore = (*Store)(nil)

// TopUp raises or sets a credits balance, once per idempotency key, under
// the subject's shard lock, so it is atomic with checks. See
// sluice.CreditStore.
func (s *Store) TopUp(ctx context.Context, t sluice.TopUp) (sluice.TopUpResult, error) {
	if err := t.Validate(); err != nil {
		return sluice.TopUpResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return sluice.TopUpResult{}, err
	}
	now := s.clock().UnixMilli()
	if !t.Now.IsZero() {
		now = t.Now.UnixMilli()
	}
	var stackKeys [512]byte
	keys := buildKeys(stackKeys[:0], t.Tenant, t.Rule, t.Subject, []sluice.Limit{t.Limit})
	key := string(keys.key(0))
	idem := idempotencyKey(key, t.IdempotencyKey)
	sh := s.shardFor(keys.tag())
	for attempt := 0; ; attempt++ {
		sh.mu.Lock()
		res, full := s.topUpLocked(sh, t, key, idem, now)
		sh.mu.Unlock()
		if full == nil {
			return res, nil
		}
		if attempt == 0 && s.reclaim(full, now) {
			continue
		}
		s.refuse(full)
		return sluice.TopUpResult{}, full
	}
}

// idempotencyKey is where a top-up's key is remembered: beside the balance,
// the key hashed so that its bytes cannot shape the store's keys.
func idempotencyKey(balanceKey, key string) string {
	sum := sha256.Sum256([]byte(key))
	return balanceKey + ":idem:" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

func (s *Store) topUpLocked(sh *shard, t sluice.TopUp, key, idem string, now int64) (sluice.TopUpResult, *BudgetError) {
	e, rec := sh.entries[key], sh.entries[idem]
	if live(rec, now) != nil {
		return sluice.TopUpResult{Balance: credits(t.Limit, live(e, now), now, 0).remaining}, nil
	}
	// Entries that exist, even expired, are counted already.
	need := int64(0)
	if e == nil {
		need++
	}
	if rec == nil {
		need++
	}
	var b *budget
	if need > 0 {
		var full *BudgetError
		if b, full = s.reserve(t.Tenant, need); full != nil {
			return sluice.TopUpResult{}, full
		}
	}
	next := creditsTopUp(t, live(e, now), now)
	s.write(sh, []byte(key), e, b, next)
	s.write(sh, []byte(idem), rec, b, state{expireAt: now + sluice.IdempotencyTTL.Milliseconds()})
	return sluice.TopUpResult{Balance: next.b, Applied: true}, nil
}
