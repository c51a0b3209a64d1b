package far

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
)

// counterMagic starts a counter's descriptor ("farCnt01").
const counterMagic uint64 = 0x3130746e43726166

// Counter descriptor layout: magic, shard count, the width word (written only with atomics
// once published), then the shards' addresses. Each shard is a word alone on its 64-byte line.
const (
	cntShards    = 8
	cntWidth     = 16
	cntAddrs     = 24
	maxCntShards = 256
)

// CounterOptions configure NewCounter.
type CounterOptions struct {
	// Nodes are the memory nodes the shards are spread over, round robin (default every memory
	// node of the topology).
	Nodes []farmem.NodeID
	// MaxShards is the most shards the counter may spread over (default twice the nodes, at
	// most 256). Every shard is allocated up front; Read reads them all.
	MaxShards int
	// HotAdds and HotWindow define "hot": when one Counter handle sees HotAdds adds within
	// HotWindow of fabric time, it doubles the counter's width (default 256 adds in 1ms).
	HotAdds   int
	HotWindow time.Duration
}

// Counter is a far counter that shards itself across memory nodes when hot. It starts with
// one active shard; Add adds to the active shard its client id selects (one FAA, one round
// trip), and when adds come fast (CounterOptions.HotAdds within HotWindow, as seen by one
// handle) the handle doubles the width with one CAS on the counter's width word, so that
// clients spread their adds over more shards and nodes. Other handles learn the width when
// they read the counter or widen it themselves. Every shard exists from the start, and Read
// sums them all, so the width is only where adds go, never what Read sees.
//
// Read is a double collect: it reads every shard in one batch (one round trip: the nodes are
// reached in parallel), then again, until two collects agree (two round trips when no Add
// lands in between, one more per collect that an Add changed). Adds take a non-negative
// delta, so each shard only grows: two equal reads of a shard prove it held that value all
// the time between them, and all the first reads precede all the second ones, so the sum is
// the counter's value at one instant between the collects. Read and Add are linearizable
// for that reason; with negative deltas a shard could return to an earlier value and a
// double collect would prove nothing, which is why Add takes a uint64. Read is lock-free:
// it retries only because Adds completed. The total wraps modulo 2^64.
//
// A *Counter is safe for concurrent use; each goroutine passes its own Client.
type Counter struct {
	desc      farmem.Addr
	shards    []farmem.Addr
	hotAdds   int
	hotWindow time.Duration

	width       atomic.Uint64 // the width this handle last saw
	windowStart atomic.Int64  // fabric time the current rate window started
	windowAdds  atomic.Int64  // adds in it
}

// NewCounter allocates a counter with value 0: its shards (one 64-byte line each, on the
// nodes round robin) and descriptor, written in one batch (one round trip), plus the
// allocator's chunk claims.
func NewCounter(ctx context.Context, c *Client, opts CounterOptions) (*Counter, error) {
	nodes := opts.Nodes
	if len(nodes) == 0 {
		nodes = c.m.Topology().MemoryNodes()
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("far: counter: no memory nodes: %w", farmem.ErrInvalid)
	}
	n := opts.MaxShards
	if n == 0 {
		n = min(2*len(nodes), maxCntShards)
	}
	if n < 1 || n > maxCntShards {
		return nil, fmt.Errorf("far: counter of %d shards (1 to %d): %w", n, maxCntShards, farmem.ErrInvalid)
	}
	k := &Counter{}
	k.setOptions(opts)
	free := func() {
		for _, s := range k.shards {
			_ = c.al.Free(s, 64)
		}
	}
	for i := range n {
		s, err := c.al.AllocOn(ctx, nodes[i%len(nodes)], 64, 64)
		if err != nil {
			free()
			return nil, err
		}
		k.shards = append(k.shards, s)
	}
	dsize := uint64(cntAddrs + 8*n)
	desc, err := c.al.AllocOn(ctx, nodes[0], dsize, 8)
	if err != nil {
		free()
		return nil, err
	}
	buf := c.scratch(int(dsize) + 8)
	le := binary.LittleEndian
	le.PutUint64(buf[0:], counterMagic)
	le.PutUint64(buf[cntShards:], uint64(n))
	le.PutUint64(buf[cntWidth:], 1)
	for i, s := range k.shards {
		le.PutUint64(buf[cntAddrs+8*i:], uint64(s))
	}
	zero := buf[dsize : dsize+8]
	clear(zero)
	b := c.batch()
	for _, s := range k.shards {
		b.Write(s, zero)
	}
	b.Write(desc, buf[:dsize])
	if err := c.m.Do(ctx, b); err != nil {
		free()
		_ = c.al.Free(desc, dsize)
		return nil, err
	}
	k.desc = desc
	k.width.Store(1)
	return k, nil
}

// CounterAt opens the counter whose descriptor is at desc (Counter.Addr of its creator): one
// round trip (a second for counters of more than 60 shards). opts gives this handle's
// HotAdds and HotWindow; its Nodes and MaxShards are ignored.
func CounterAt(ctx context.Context, c *Client, desc farmem.Addr, opts CounterOptions) (*Counter, error) {
	buf := c.scratch(512)
	if err := c.m.Read(ctx, desc, buf[:cntAddrs]); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	n := le.Uint64(buf[cntShards:])
	w := le.Uint64(buf[cntWidth:])
	if le.Uint64(buf[0:]) != counterMagic || n < 1 || n > maxCntShards || w < 1 || w > n {
		return nil, fmt.Errorf("far: counter at %v: bad descriptor: %w", desc, farmem.ErrInvalid)
	}
	buf = c.scratch(cntAddrs + 8*int(n))
	if err := c.m.Read(ctx, desc, buf); err != nil {
		return nil, err
	}
	k := &Counter{desc: desc}
	k.setOptions(opts)
	for i := range int(n) {
		s := farmem.Addr(le.Uint64(buf[cntAddrs+8*i:]))
		if s == 0 || s.Offset()%8 != 0 {
			return nil, fmt.Errorf("far: counter at %v: shard %d at %v: %w", desc, i, s, farmem.ErrInvalid)
		}
		k.shards = append(k.shards, s)
	}
	k.width.Store(le.Uint64(buf[cntWidth:]))
	return k, nil
}

func (k *Counter) setOptions(opts CounterOptions) {
	k.hotAdds, k.hotWindow = opts.HotAdds, opts.HotWindow
	if k.hotAdds <= 0 {
		k.hotAdds = 256
	}
	if k.hotWindow <= 0 {
		k.hotWindow = time.Millisecond
	}
}

// Addr returns the counter's descriptor address, for CounterAt.
func (k *Counter) Addr() farmem.Addr { return k.desc }

// Shards returns the number of shards (the most the counter spreads over).
func (k *Counter) Shards() int { return len(k.shards) }

// Width returns the number of shards adds go to, as this handle last saw it.
func (k *Counter) Width() int { return int(k.width.Load()) }

// Add adds delta: one FAA on the shard c's client id selects among the active ones, one round
// trip; and, when this handle finds the counter hot, one more (the CAS that widens it).
func (k *Counter) Add(ctx context.Context, c *Client, delta uint64) error {
	w := k.width.Load()
	s := k.shards[uint64(c.m.Info().ID)%w]
	if _, err := c.m.FAA(ctx, s, delta); err != nil {
		return err
	}
	if w >= uint64(len(k.shards)) {
		return nil
	}
	now := int64(c.m.Runtime().Now())
	start := k.windowStart.Load()
	if now-start > int64(k.hotWindow) {
		if k.windowStart.CompareAndSwap(start, now) {
			k.windowAdds.Store(0)
		}
		return nil
	}
	if k.windowAdds.Add(1) < int64(k.hotAdds) {
		return nil
	}
	k.windowAdds.Store(0)
	k.windowStart.Store(now)
	nw := min(2*w, uint64(len(k.shards)))
	prev, err := c.m.CAS(ctx, k.desc.Add(cntWidth), w, nw)
	if err != nil {
		return nil // the add itself is done; widening is only a hint
	}
	if prev == w {
		prev = nw
	} else {
		c.stats.CASRetries++
	}
	for {
		cur := k.width.Load()
		if prev <= cur || k.width.CompareAndSwap(cur, prev) {
			return nil
		}
	}
}

// Read returns the counter's value: a double collect of every shard (see Counter), two round
// trips when no Add lands between its collects.
func (k *Counter) Read(ctx context.Context, c *Client) (uint64, error) {
	n := len(k.shards)
	buf := c.scratch(16 * (n + 1))
	first, second := buf[:8*(n+1)], buf[8*(n+1):]
	collect := func(into []byte) error {
		b := c.batch()
		for i, s := range k.shards {
			b.Read(s, into[8*i:8*i+8])
		}
		b.Read(k.desc.Add(cntWidth), into[8*n:])
		return c.m.Do(ctx, b)
	}
	if err := collect(first); err != nil {
		return 0, err
	}
	for {
		if err := collect(second); err != nil {
			return 0, err
		}
		same := true
		var sum uint64
		for i := range n {
			a, b := binary.LittleEndian.Uint64(first[8*i:]), binary.LittleEndian.Uint64(second[8*i:])
			same = same && a == b
			sum += b
		}
		if w := binary.LittleEndian.Uint64(second[8*n:]); w > k.width.Load() && w <= uint64(n) {
			k.width.Store(w)
		}
		if same {
			return sum, nil
		}
		first, second = second, first
	}
}

// Free retires the counter's shards and descriptor through the allocator's deferred free.
// The caller must make sure no client uses it afterwards.
func (k *Counter) Free(ctx context.Context, c *Client) error {
	for _, s := range k.shards {
		if err := c.al.Retire(ctx, s, 64); err != nil {
			return err
		}
	}
	return c.al.Retire(ctx, k.desc, uint64(cntAddrs+8*len(k.shards)))
}
