package farcoll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
)

// Errors of Queue.
var (
	// ErrFull: Enqueue found the queue holding Cap elements.
	ErrFull = errors.New("farcoll: queue full")
	// ErrEmpty: Dequeue found the queue empty.
	ErrEmpty = errors.New("farcoll: queue empty")
)

// queueMagic starts a queue's header ("farQue01").
const queueMagic uint64 = 0x3130657551726166

// Queue header layout: magic, capacity, element size; then head and tail, each on its own
// 64-byte line (written only with atomics after creation); then the cells.
const (
	qMagic   = 0
	qCap     = 8
	qSize    = 16
	qHead    = 64
	qTail    = 128
	qCells   = 192
	maxQueue = 1 << 24
)

// QueueOptions configure NewQueue.
type QueueOptions[T any] struct {
	// Node is the memory node the queue lives on (default: the client allocator's placement).
	Node farmem.NodeID
	// Codec encodes T (default far.Binary[T]()).
	Codec far.Codec[T]
}

// Queue is a bounded multi-producer, multi-consumer far queue of T: a ring of Cap cells on one
// memory node, each a sequence word and a value, with head and tail words claimed by CAS (a
// far version of Vyukov's bounded queue). Position p lives in cell p mod Cap; the cell's
// sequence word is p when the cell is free for position p's producer, p+1 once the value is
// written, and p+Cap once position p's consumer has read it. A *Queue is immutable and safe for
// concurrent use; each goroutine passes its own far.Client.
//
//	Enqueue   read tail and head (1 round trip), CAS the tail with a read of the cell's
//	          sequence word behind it (1), write the value then the sequence word (1): 3
//	Dequeue   read head and tail (1), CAS the head with reads of the cell's sequence word and
//	          value behind it (1), then the write of the sequence word that frees the cell (1): 3
//
// plus one round trip per lost CAS and per poll while a claimed cell is not ready.
//
// Linearizable: an Enqueue takes effect at its tail CAS, a Dequeue at its head CAS, and
// positions order both; ErrFull and ErrEmpty are decided from a tail read before a head read
// (or the reverse) in one batch, which shows the queue full (empty) at the first read. The
// claims are lock-free; a claimed cell is then awaited: a consumer whose position's producer
// has claimed but not yet written polls the cell (with backoff in fabric time) until the value
// is there, and a producer whose cell's previous consumer has not yet released it likewise. So
// a client that stalls between its claim and its write stalls the client that next uses that
// cell, and one that crashes there (or whose write fails with farmem.ErrNodeDown) blocks it
// until its context ends: the queue is blocking in that window, as Vyukov's is.
type Queue[T any] struct {
	a     farmem.Addr
	cap   int
	size  int
	cell  int // bytes per cell: the sequence word and the value, 8-aligned
	codec far.Codec[T]
}

// NewQueue allocates an empty queue of capacity cap (1 to 2^24): one round trip (the header
// and every cell's sequence word, in one Write), plus the allocator's chunk claims.
func NewQueue[T any](ctx context.Context, c *far.Client, cap int, opts QueueOptions[T]) (*Queue[T], error) {
	codec, err := codecOf(opts.Codec)
	if err != nil {
		return nil, err
	}
	if cap < 1 || cap > maxQueue {
		return nil, fmt.Errorf("farcoll: queue capacity %d (1 to %d): %w", cap, maxQueue, farmem.ErrInvalid)
	}
	q := &Queue[T]{cap: cap, size: codec.Size(), codec: codec}
	q.cell = 8 + (q.size+7)&^7
	total := qCells + cap*q.cell
	if total > farmem.MaxOpBytes {
		return nil, fmt.Errorf("farcoll: queue of %d bytes (at most %d): %w", total, farmem.MaxOpBytes, farmem.ErrInvalid)
	}
	al := c.Allocator()
	if opts.Node == 0 {
		q.a, err = al.Alloc(ctx, uint64(total), 64)
	} else {
		q.a, err = al.AllocOn(ctx, opts.Node, uint64(total), 64)
	}
	if err != nil {
		return nil, err
	}
	buf := c.Scratch(total)
	clear(buf)
	le := binary.LittleEndian
	le.PutUint64(buf[qMagic:], queueMagic)
	le.PutUint64(buf[qCap:], uint64(cap))
	le.PutUint64(buf[qSize:], uint64(q.size))
	for i := range cap {
		le.PutUint64(buf[qCells+i*q.cell:], uint64(i))
	}
	if err := c.Memory().Write(ctx, q.a, buf); err != nil {
		_ = al.Free(q.a, uint64(total))
		return nil, err
	}
	return q, nil
}

// QueueAt opens the queue at a (Queue.Addr of its creator): one round trip (the header's
// Read). codec nil means far.Binary[T](); its size must be the queue's.
func QueueAt[T any](ctx context.Context, c *far.Client, a farmem.Addr, codec far.Codec[T]) (*Queue[T], error) {
	codec, err := codecOf(codec)
	if err != nil {
		return nil, err
	}
	if a == 0 || a.Offset()%64 != 0 {
		return nil, fmt.Errorf("farcoll: queue at %v: not 64-aligned: %w", a, farmem.ErrInvalid)
	}
	buf := c.Scratch(24)
	if err := c.Memory().Read(ctx, a, buf); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	capacity, size := le.Uint64(buf[qCap:]), le.Uint64(buf[qSize:])
	if le.Uint64(buf[qMagic:]) != queueMagic || capacity < 1 || capacity > maxQueue || size != uint64(codec.Size()) {
		return nil, fmt.Errorf("farcoll: queue at %v: bad header: %w", a, farmem.ErrInvalid)
	}
	q := &Queue[T]{a: a, cap: int(capacity), size: int(size), codec: codec}
	q.cell = 8 + (q.size+7)&^7
	return q, nil
}

// Addr returns the queue's address, for QueueAt.
func (q *Queue[T]) Addr() farmem.Addr { return q.a }

// Cap returns the queue's capacity.
func (q *Queue[T]) Cap() int { return q.cap }

func (q *Queue[T]) cellAt(pos uint64) farmem.Addr {
	return q.a.Add(qCells + (pos%uint64(q.cap))*uint64(q.cell))
}

// Enqueue appends v, or fails with ErrFull (having changed nothing). See Queue for costs.
func (q *Queue[T]) Enqueue(ctx context.Context, c *far.Client, v T) error {
	m := c.Memory()
	le := binary.LittleEndian
	for {
		buf := c.Scratch(24 + q.cell)
		b := c.Batch()
		b.Read(q.a.Add(qTail), buf[0:8])
		b.Read(q.a.Add(qHead), buf[8:16])
		if err := m.Do(ctx, b); err != nil {
			return err
		}
		tail, head := le.Uint64(buf[0:8]), le.Uint64(buf[8:16])
		if head > tail {
			continue // both moved between the two reads
		}
		if tail-head >= uint64(q.cap) {
			return ErrFull
		}
		cell := q.cellAt(tail)
		b = c.Batch()
		i := b.CAS(q.a.Add(qTail), tail, tail+1)
		b.Read(cell, buf[16:24])
		if err := m.Do(ctx, b); err != nil {
			return err
		}
		if prev, _ := b.Result(i); prev != tail {
			continue // another producer took the position
		}
		// Position tail is ours: wait until its cell's previous consumer has released it.
		if err := q.await(ctx, c, cell, buf[16:24], tail, nil); err != nil {
			return err
		}
		data := buf[24 : 24+q.cell]
		le.PutUint64(data[0:8], tail+1)
		clear(data[8:])
		q.codec.Encode(data[8:], v)
		b = c.Batch()
		b.Write(cell.Add(8), data[8:])
		b.Write(cell, data[0:8])
		return m.Do(ctx, b)
	}
}

// Dequeue removes and returns the oldest element, or fails with ErrEmpty (having changed
// nothing). See Queue for costs.
func (q *Queue[T]) Dequeue(ctx context.Context, c *far.Client) (T, error) {
	var zero T
	m := c.Memory()
	le := binary.LittleEndian
	for {
		buf := c.Scratch(24 + q.cell)
		b := c.Batch()
		b.Read(q.a.Add(qHead), buf[0:8])
		b.Read(q.a.Add(qTail), buf[8:16])
		if err := m.Do(ctx, b); err != nil {
			return zero, err
		}
		head, tail := le.Uint64(buf[0:8]), le.Uint64(buf[8:16])
		if tail <= head {
			return zero, ErrEmpty
		}
		cell := q.cellAt(head)
		data := buf[24 : 24+q.cell]
		b = c.Batch()
		i := b.CAS(q.a.Add(qHead), head, head+1)
		b.Read(cell, data[0:8])
		b.Read(cell.Add(8), data[8:])
		if err := m.Do(ctx, b); err != nil {
			return zero, err
		}
		if prev, _ := b.Result(i); prev != head {
			continue // another consumer took the position
		}
		// Position head is ours: wait until its producer has written the value.
		if err := q.await(ctx, c, cell, data[0:8], head+1, data[8:]); err != nil {
			return zero, err
		}
		v := q.codec.Decode(data[8:])
		le.PutUint64(buf[16:24], head+uint64(q.cap))
		// A signaled write: the contract applies an unsignaled one only before this client's
		// next op to the node, which may never come, and a producer waits for this word.
		if err := m.Write(ctx, cell, buf[16:24]); err != nil {
			return zero, err
		}
		return v, nil
	}
}

// await polls cell's sequence word (seq holds the last read of it) until it is want, reading
// value (if not nil) after it in the same batch, with backoff in fabric time.
func (q *Queue[T]) await(ctx context.Context, c *far.Client, cell farmem.Addr, seq []byte, want uint64, value []byte) error {
	backoff := time.Microsecond
	for binary.LittleEndian.Uint64(seq) != want {
		if err := c.Memory().Runtime().Sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 100*time.Microsecond)
		b := c.Batch()
		b.Read(cell, seq)
		if value != nil {
			b.Read(cell.Add(8), value)
		}
		if err := c.Memory().Do(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// Free retires the queue through the allocator's deferred free. The caller must make sure no
// client uses it afterwards.
func (q *Queue[T]) Free(ctx context.Context, c *far.Client) error {
	return c.Allocator().Retire(ctx, q.a, uint64(qCells+q.cap*q.cell))
}
