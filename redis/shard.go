package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelabs/sluice"
)

// clusterShards bounds the shards (breakers) of a Cluster store: one per
// master node seen, so that one dead master opens only the breaker of the
// keys it holds. Past this many masters seen over the store's life, nodes
// share breakers (index modulo).
const clusterShards = 64

// slotMapRefresh is how often a Cluster store re-reads which master owns
// which slot (CLUSTER SLOTS): after a failover, the promoted replica's keys
// move to a breaker of its own within this.
const slotMapRefresh = time.Second

// slotMap says which shard (master node) owns each of the 16,384 slots.
type slotMap struct {
	owner [16384]uint8
}

// nodeShards assigns each master address seen a shard index, for good.
type nodeShards struct {
	mu    sync.Mutex
	index map[string]uint8
}

func (n *nodeShards) of(addr string) uint8 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i, ok := n.index[addr]; ok {
		return i
	}
	i := uint8(len(n.index) % clusterShards)
	n.index[addr] = i
	return i
}

// startSlotMap reads the slot map now and then every slotMapRefresh until
// Close. Only Cluster stores call it.
func (s *Store) startSlotMap() {
	s.nodes = &nodeShards{index: map[string]uint8{}}
	s.stopSlots = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = s.refreshSlotMap(ctx)
	cancel()
	go func() {
		t := time.NewTicker(slotMapRefresh)
		defer t.Stop()
		for {
			select {
			case <-s.stopSlots:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), slotMapRefresh)
				// A failed read keeps the last map: the breakers of the
				// nodes it names go on judging them.
				_ = s.refreshSlotMap(ctx)
				cancel()
			}
		}
	}()
}

// refreshSlotMap reads CLUSTER SLOTS: for each slot range, its master's
// address (the first node of the range).
func (s *Store) refreshSlotMap(ctx context.Context) error {
	ranges, err := s.client.Do(ctx, s.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return err
	}
	m := &slotMap{}
	for _, r := range ranges {
		fields, err := r.ToArray()
		if err != nil || len(fields) < 3 {
			return fmt.Errorf("CLUSTER SLOTS: unexpected range %v", r)
		}
		start, err1 := fields[0].AsInt64()
		end, err2 := fields[1].AsInt64()
		master, err3 := fields[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || start < 0 || end > 16383 || start > end {
			return fmt.Errorf("CLUSTER SLOTS: unexpected range %v", r)
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		shard := s.nodes.of(fmt.Sprintf("%s:%d", host, port))
		for slot := start; slot <= end; slot++ {
			m.owner[slot] = shard
		}
	}
	s.slots.Store(m)
	return nil
}

// Shards is up to 64 master nodes on a Redis Cluster, else 1: a single
// server or a Sentinel-managed master fails as a whole.
func (s *Store) Shards() int {
	if s.nodes != nil {
		return clusterShards
	}
	return 1
}

// Shard is the master node holding the counters of a subject of (tenant,
// rule), as the last CLUSTER SLOTS read says: every key of a check shares
// the subject's hash tag, so one slot.
func (s *Store) Shard(tenant, rule, subject string) int {
	m := s.slots.Load()
	if m == nil {
		return 0
	}
	var tagBuf [sluice.SubjectTagLen]byte
	tag := sluice.AppendSubjectTag(tagBuf[:0], tenant, rule, subject)
	return int(m.owner[keySlot(tag)])
}

// keySlot is Redis Cluster's slot of a hash tag: CRC16 (XMODEM) mod 16384.
func keySlot(tag []byte) uint16 {
	var crc uint16
	for _, b := range tag {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// slotState is the Cluster bookkeeping of a Store.
type slotState struct {
	nodes     *nodeShards
	slots     atomic.Pointer[slotMap]
	stopSlots chan struct{}
	stopOnce  sync.Once
}

func (s *slotState) stopSlotMap() {
	if s.stopSlots != nil {
		s.stopOnce.Do(func() { close(s.stopSlots) })
	}
}
