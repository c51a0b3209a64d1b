package bench

import (
	"context"
	"fmt"
	"strconv"
)

// RedisIndexKey is the sorted set an indexed Redis peer keeps its keys in. YCSB's redis
// binding does the same with its "_indices" set: ZADD on insert, a range query for a scan's
// keys, then a read of each. Two differences, both deliberate:
//
//   - YCSB scores each key by its Java hashCode and scans with ZRANGEBYSCORE from the start
//     key's hash, so its scans follow the hashes' order, not the keys'. Here every member has
//     score 0 and a scan takes the keys with ZRANGEBYLEX from "[start" on, in bytewise order
//     (redis compares members with memcmp), the order Scanner and kvstore.OrderedIndex
//     promise, for string and binary64 keys alike.
//   - YCSB's insert is a write then a ZADD, two round trips, and its scan reads the records one
//     by one. Here the insert pipelines SET ... NX with ZADD NX (one round trip; ZADD NX of a
//     key that was there is a no-op), and a scan fetches its records with one MGET per chunk
//     of RedisScanChunk keys: a scan of n records is 2*ceil(n/RedisScanChunk) round trips.
//
// Neither is atomic: a scan running beside an insert may miss the new key (whose SET ran
// before its ZADD), as a scan need not be atomic. The name is not 8 bytes long and does not
// start with "user", so no workload key (binary64 or YCSB's) can be it.
const RedisIndexKey = "farmem:bench:index"

// RedisScanChunk is the number of keys an indexed Redis scan asks for per ZRANGEBYLEX and
// MGET, which bounds a reply's size.
const RedisScanChunk = 1024

const redisIndexedName = "redis/zset"

var (
	cmdZADD        = []byte("ZADD")
	cmdZRANGEBYLEX = []byte("ZRANGEBYLEX")
	cmdMGET        = []byte("MGET")
	argLIMIT       = []byte("LIMIT")
	argZero        = []byte("0")
	argPlus        = []byte("+")
	redisIndex     = []byte(RedisIndexKey)
)

// redisIndexSession is a session of an indexed Redis: inserts also index the key, and it
// scans.
type redisIndexSession struct{ *redisSession }

func (s *redisIndexSession) Insert(ctx context.Context, key, value []byte) error {
	reps, err := s.pipeline(ctx,
		[][]byte{cmdSET, key, value, argNX},
		[][]byte{cmdZADD, redisIndex, argNX, argZero, key})
	if err != nil {
		return err
	}
	switch set := reps[0]; {
	case set.kind == '$' && set.null:
		return fmt.Errorf("redis SET NX %q: %w", key, ErrExists)
	case set.kind != '+' || string(set.str) != "OK":
		return set.unexpected("SET")
	case reps[1].kind != ':':
		return reps[1].unexpected("ZADD")
	}
	return nil
}

// Scan implements Scanner: the keys from the index, then their values. A key the index holds
// whose value is gone (deleted by a client of the server outside the benchmark) is skipped.
func (s *redisIndexSession) Scan(ctx context.Context, start []byte, n int, visit func(key, value []byte)) (int, error) {
	from := append([]byte{'['}, start...)
	got := 0
	for got < n {
		want := min(n-got, RedisScanChunk)
		rep, err := s.do(ctx, cmdZRANGEBYLEX, redisIndex, from, argPlus, argLIMIT, argZero, strconv.AppendInt(nil, int64(want), 10))
		if err != nil {
			return got, err
		}
		if rep.kind != '*' || rep.null {
			return got, rep.unexpected("ZRANGEBYLEX")
		}
		if len(rep.elems) == 0 {
			break
		}
		keys := make([][]byte, 0, len(rep.elems)+1)
		keys = append(keys, cmdMGET)
		for _, e := range rep.elems {
			if e.kind != '$' || e.null {
				return got, e.unexpected("ZRANGEBYLEX")
			}
			keys = append(keys, e.str)
		}
		vals, err := s.do(ctx, keys...)
		if err != nil {
			return got, err
		}
		if vals.kind != '*' || len(vals.elems) != len(keys)-1 {
			return got, vals.unexpected("MGET")
		}
		for i, v := range vals.elems {
			if v.kind != '$' {
				return got, v.unexpected("MGET")
			}
			if v.null {
				continue
			}
			if visit != nil {
				visit(keys[i+1], v.str)
			}
			got++
		}
		if len(rep.elems) < want {
			break // the index has no more keys
		}
		last := keys[len(keys)-1]
		from = append(append(from[:0], '('), last...) // after the last key
	}
	return got, nil
}
