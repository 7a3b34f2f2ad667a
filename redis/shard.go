package redis

import (
	"github.com/redis/rueidis"

	"github.com/sluicelabs/sluice"
)

// clusterShards is how many slot ranges a Cluster's 16,384 slots are cut
// into, each with its own circuit breaker (see guard.Sharded): a dead master
// owns whole ranges (a third of them with three masters), so its failures
// open only the breakers of its own keys. 64 ranges of 256 slots keep the
// breakers few, and a range shared by two masters after a resharding fails
// only part of its checks.
const clusterShards = 64

// Shards is 64 slot ranges on a Redis Cluster, else 1: a single server or a
// Sentinel-managed master fails as a whole.
func (s *Store) Shards() int {
	if s.client.Mode() == rueidis.ClientModeCluster {
		return clusterShards
	}
	return 1
}

// Shard is the slot range holding the counters of a subject of (tenant,
// rule): every key of a check shares the subject's hash tag, so one slot.
func (s *Store) Shard(tenant, rule, subject string) int {
	if s.client.Mode() != rueidis.ClientModeCluster {
		return 0
	}
	var tagBuf [sluice.SubjectTagLen]byte
	tag := sluice.AppendSubjectTag(tagBuf[:0], tenant, rule, subject)
	return int(keySlot(tag)) * clusterShards / 16384
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
