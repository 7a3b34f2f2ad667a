package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// Replicated writes (Options.ReplicaAcks). Redis replicates asynchronously:
// a primary that dies or is cut off and replaced by a replica (a Sentinel or
// Cluster failover) loses every count it took since its last replication,
// and the promoted replica admits those units again. With ReplicaAcks N,
// every script call that may write is sent together with WAIT N <timeout>,
// pipelined in one DoMulti (on a single Redis or Sentinel, batched with
// other checks under one WAIT: see groupcommit.go): rueidis sends a DoMulti holding a blocking
// command (WAIT is one) on one connection of its dedicated pool, and on a
// Cluster every command of it to the master of the keys' slot, so the WAIT
// counts the replicas that have this script's writes. A call that wrote and
// was acknowledged by fewer than N replicas is a store failure: the rule's
// failure mode answers, never an allow whose count may be lost. A call
// that wrote nothing (a deny, a hold that had already ended) is judged by
// the script alone; a peek, which never writes a count, is sent without
// WAIT.
//
// What WAIT does not cover: a Cluster slot migration (MOVED or ASK while
// resharding) makes rueidis re-send the script alone to the new owner, so
// the WAIT's answer is the old owner's; a failover's redirection is not
// affected (the demoted master refuses WAIT, which fails the check).

// DefaultReplicaAckTimeout is the WAIT timeout of a zero
// Options.ReplicaAckTimeout: the service's default store deadline.
const DefaultReplicaAckTimeout = 50 * time.Millisecond

// ErrTooFewReplicas is wrapped (with sluice.ErrStoreUnavailable) by the
// error of a call whose writes fewer than Options.ReplicaAcks replicas
// acknowledged in time.
var ErrTooFewReplicas = errors.New("too few replicas acknowledged the write")

// checkSHA is the SHA-1 EVALSHA names check.lua by.
var checkSHA = func() string {
	sum := sha1.Sum([]byte(checkSource))
	return hex.EncodeToString(sum[:])
}()

// replicas is the replicated-writes setting of a Store.
type replicas struct {
	acks    int64
	timeout time.Duration
}

// execScript runs check.lua over keys and args. With replica acks and a
// call that may write, WAIT follows in the same round trip and its answer
// is returned as acks; wrote, called with the script's reply, says whether
// the call changed anything, and an unacknowledged change is an error.
func (s *Store) execScript(ctx context.Context, keys, args []string, mayWrite bool, wrote func([]rueidis.RedisMessage) bool) ([]rueidis.RedisMessage, error) {
	if s.replicas.acks == 0 || !mayWrite {
		return checkScript.Exec(ctx, s.client, keys, args).ToArray()
	}
	timeout := s.replicas.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	// WAIT 0 would wait for ever.
	waitMS := max(timeout.Milliseconds(), 1)
	send := func(script rueidis.Completed) (rueidis.RedisResult, rueidis.RedisResult) {
		wait := s.client.B().Wait().Numreplicas(s.replicas.acks).Timeout(waitMS).Build()
		if len(keys) > 0 {
			wait = wait.SetSlot(keys[0]) // with the script, on its keys' master
		}
		res := s.client.DoMulti(ctx, script, wait)
		return res[0], res[1]
	}
	b := s.client.B()
	evalsha := b.Evalsha().Sha1(checkSHA).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	var reply, acks rueidis.RedisResult
	if s.commits != nil {
		res, err := s.commits.do(ctx, evalsha)
		if err != nil {
			return nil, err
		}
		reply, acks, waitMS = res.reply, res.acks, res.waitMS
	} else {
		reply, acks = send(evalsha)
	}
	if re, ok := rueidis.IsRedisErr(reply.Error()); ok && re.IsNoScript() {
		reply, acks = send(b.Eval().Script(checkSource).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	values, err := reply.ToArray()
	if err != nil {
		return nil, err
	}
	if !wrote(values) {
		return values, nil
	}
	n, err := acks.AsInt64()
	if err != nil {
		return nil, fmt.Errorf("%w: WAIT %d: %w", ErrTooFewReplicas, s.replicas.acks, err)
	}
	if n < s.replicas.acks {
		return nil, fmt.Errorf("%w: %d of %d replicas within %dms", ErrTooFewReplicas, n, s.replicas.acks, waitMS)
	}
	return values, nil
}
