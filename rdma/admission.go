package rdma

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds what keeps a node's memory and its door bounded whatever its clients send:
// the node-wide byte budgets large frames are charged to, the unauthenticated connections'
// admission, and the rate limit on repeated log lines.

// Per-connection buffer sizes. A connection reads through a bufio.Reader of connReadBuf bytes
// (handshakeReadBuf until it authenticates), keeps one frame buffer of frameBuf bytes for the
// frames that fit it, and queues small replies up to outFlushAt bytes before it writes them.
// Frames and replies larger than those are charged to the node's budgets.
const (
	handshakeReadBuf = 1 << 10
	connReadBuf      = 32 << 10
	frameBuf         = 32 << 10
	outFlushAt       = 32 << 10
	// smallReply is the largest reply frame queued with others; larger ones are built in their
	// own buffer, charged to the output budget, and written at once.
	smallReply = 32 << 10
	// maxSmallQueue bounds a connection's queue of small replies: it is flushed at outFlushAt,
	// and one more small reply (or a control reply, at most a few KiB) may join it first.
	maxSmallQueue = outFlushAt + smallReply + 16<<10
	// ConnBufferBound is the most memory one authenticated connection holds outside the node's
	// budgets: its read buffer, its frame buffer and its queue of small replies.
	ConnBufferBound = connReadBuf + frameBuf + maxSmallQueue
)

// budget is a node-wide allowance of bytes for large buffers: a connection takes a buffer from
// it before it holds a large request payload or reply, and gives it back once done. A
// connection that cannot get one waits, and while it waits it reads nothing more from its
// client: the limit turns into backpressure on that client, never into growth. Every holder
// gives back within the node's write timeout (a reply is written or the connection closed; a
// request's payload arrives or the connection is closed), so waiters always make progress.
// Input and output have separate budgets, and an input holder may wait for output but never the
// reverse, so the two cannot deadlock.
//
// Buffers given back are kept for reuse (sparing the allocation, the zeroing and the garbage)
// while they stay charged: at most a quarter of the limit is kept idle, and none while anyone
// waits. So the budget bounds the memory in use and kept together. Sizes are rounded up to a
// power of two from 64 KiB to 1 MiB and to a whole MiB above, so a kept buffer fits the next
// request of its class.
type budget struct {
	limit int64
	mu    sync.Mutex
	used  int64         // charged: in use and kept
	kept  [][]byte      // idle buffers, charged
	idle  int64         // their bytes
	wait  int           // connections waiting
	wake  chan struct{} // closed and replaced whenever bytes are freed
	// For the metrics: waits counts gets that had to wait; inUse mirrors used-idle and keptB
	// idle.
	waits atomic.Uint64
	inUse atomic.Int64
	keptB atomic.Int64
}

func newBudget(limit int64) *budget { return &budget{limit: limit, wake: make(chan struct{})} }

// bufClass is the capacity get allocates for n bytes: the next power of two from 64 KiB to
// 1 MiB, the next whole MiB above, but never more than the limit.
func (b *budget) bufClass(n int) int64 {
	c := int64(64 << 10)
	for c < int64(n) && c < 1<<20 {
		c <<= 1
	}
	if c < int64(n) {
		c = (int64(n) + 1<<20 - 1) &^ (1<<20 - 1)
	}
	if c > b.limit {
		c = int64(n)
	}
	return c
}

func (b *budget) publishLocked() {
	b.inUse.Store(b.used - b.idle)
	b.keptB.Store(b.idle)
}

// get returns a buffer of length 0 and capacity at least n (n <= limit), waiting while the
// budget is spent; it reports false if stop closed first.
func (b *budget) get(n int, stop <-chan struct{}) ([]byte, bool) {
	want := b.bufClass(n)
	waited := false
	b.mu.Lock()
	for {
		for i, buf := range b.kept {
			if int64(cap(buf)) == want {
				last := len(b.kept) - 1
				b.kept[i], b.kept[last] = b.kept[last], nil
				b.kept = b.kept[:last]
				b.idle -= want
				b.publishLocked()
				b.mu.Unlock()
				return buf[:0], true
			}
		}
		// Idle buffers of other sizes make room first.
		for b.used+want > b.limit && len(b.kept) > 0 {
			b.dropLocked(len(b.kept) - 1)
		}
		if b.used+want <= b.limit {
			b.used += want
			b.publishLocked()
			b.mu.Unlock()
			return make([]byte, 0, want), true
		}
		if !waited {
			waited = true
			b.waits.Add(1)
		}
		b.wait++
		ch := b.wake
		b.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			b.mu.Lock()
			b.wait--
			b.mu.Unlock()
			return nil, false
		}
		b.mu.Lock()
		b.wait--
	}
}

// put gives back a buffer get returned: kept for reuse when there is room and nobody waits,
// else freed.
func (b *budget) put(buf []byte) {
	c := int64(cap(buf))
	b.mu.Lock()
	if b.wait == 0 && b.idle+c <= b.limit/4 {
		b.kept = append(b.kept, buf[:0])
		b.idle += c
	} else {
		b.used -= c
		close(b.wake)
		b.wake = make(chan struct{})
	}
	b.publishLocked()
	b.mu.Unlock()
}

// dropLocked frees the kept buffer i. b.mu is held.
func (b *budget) dropLocked(i int) {
	c := int64(cap(b.kept[i]))
	last := len(b.kept) - 1
	b.kept[i], b.kept[last] = b.kept[last], nil
	b.kept = b.kept[:last]
	b.idle -= c
	b.used -= c
	b.publishLocked()
	close(b.wake)
	b.wake = make(chan struct{})
}

// Refusal reasons, as the node's counters name them.
const (
	refuseBusy     = iota // authenticated, but the node is at its connection limit
	refuseEvicted         // unauthenticated, pushed out by a newer connection at the budget
	refuseTimeout         // the handshake did not finish within its deadline
	refuseProtocol        // the handshake's frames were malformed or out of order
	refuseAuth            // the client does not hold the cluster secret
	refuseNode            // the client wanted another node
	numRefuse
)

var refuseNames = [numRefuse]string{"busy", "evicted", "handshake_timeout", "protocol", "auth", "wrong_node"}

// Handshake stages of a connection, for the choice of whom to push out.
const (
	stageNew    = iota // accepted; its handshake has not yet looked for a hello
	stageSilent        // it looked, and the client had sent nothing
	stageSpoke         // a hello arrived
)

// evictVictimLocked picks the unauthenticated connection to push out when the budget is full:
// the oldest found silent, else the oldest not yet looked at, else the oldest of all. A client
// that holds the secret sends its hello as soon as it connects and completes the handshake in
// one round trip, so silent connections, however many, are pushed out before it. s.mu is held.
func (s *srv) evictVictimLocked() *sconn {
	var best [stageSpoke + 1]*sconn
	for c := range s.unauth {
		st := c.stage.Load()
		if b := best[st]; b == nil || c.seq < b.seq {
			best[st] = c
		}
	}
	for _, st := range []int32{stageSilent, stageNew, stageSpoke} {
		if c := best[st]; c != nil {
			return c
		}
	}
	return nil
}

// rateLog writes repeated log lines at a bounded rate: for each key, at most burst lines per
// window of every; the lines over that are counted, and the next line written for the key
// reports them as "suppressed". It costs a map lookup under a mutex per line.
type rateLog struct {
	log   *slog.Logger
	every time.Duration
	burst int
	mu    sync.Mutex
	keys  map[string]*rateKey
}

type rateKey struct {
	window     time.Time
	n          int
	suppressed uint64
}

// A node's rate of repeated log lines: at most logBurst per kind per logEvery.
const (
	logEvery = 10 * time.Second
	logBurst = 5
)

func newRateLog(log *slog.Logger, every time.Duration, burst int) *rateLog {
	return &rateLog{log: log, every: every, burst: burst, keys: make(map[string]*rateKey)}
}

// warn logs msg at level Warn under key, unless key is over its rate.
func (r *rateLog) warn(key, msg string, attrs ...any) { r.logAt(slog.LevelWarn, key, msg, attrs...) }

func (r *rateLog) logAt(level slog.Level, key, msg string, attrs ...any) {
	if !r.log.Enabled(context.Background(), level) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	k := r.keys[key]
	if k == nil {
		if len(r.keys) > 1024 { // keys are a fixed vocabulary; this only guards against misuse
			clear(r.keys)
		}
		k = &rateKey{window: now}
		r.keys[key] = k
	}
	if now.Sub(k.window) >= r.every {
		k.window, k.n = now, 0
	}
	if k.n >= r.burst {
		k.suppressed++
		r.mu.Unlock()
		return
	}
	k.n++
	sup := k.suppressed
	k.suppressed = 0
	r.mu.Unlock()
	if sup > 0 {
		attrs = append(attrs, "suppressed", sup)
	}
	r.log.Log(context.Background(), level, msg, attrs...)
}
