package far

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Errors of the package. Each wraps farmem.ErrInvalid: they report a misuse, refused before
// any verb.
var (
	// ErrType: the type cannot live in far memory (see CheckType), or a codec's size does not
	// fit the mode (a Word mode value larger than 8 bytes).
	ErrType = fmt.Errorf("far: type cannot live in far memory: %w", farmem.ErrInvalid)
	// ErrMode: the operation does not exist in the pointer's mode (CompareAndSwap on a pointer
	// that is not in Word mode).
	ErrMode = fmt.Errorf("far: operation not available in this mode: %w", farmem.ErrInvalid)
	// ErrNotOwner: a Store to a SingleWriter pointer by a client that does not own it (Own).
	ErrNotOwner = fmt.Errorf("far: client does not own this single-writer pointer: %w", farmem.ErrInvalid)
	// ErrNil: an operation on the zero Ptr, Uint64 or Int64, or a pointer whose cell holds no
	// block (it was freed, or the address does not name a pointer of this mode).
	ErrNil = fmt.Errorf("far: nil far pointer: %w", farmem.ErrInvalid)
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// Format formats memory nodes that are not formatted yet (alloc.FormatAll with these
	// options); nodes already formatted are used as they are.
	Format alloc.FormatOptions
	// Alloc configures the client's allocator (the lease and refresh of deferred free).
	Alloc alloc.Options
	// Lock configures the far lock of Locked pointers. Its Offset is where the client's
	// qlock node (qlock.NodeSize bytes) lies in its slice of its compute node's region
	// (default 0): no other user of the same Memory may use those bytes.
	Lock qlock.Options
}

// Client is one goroutine's access to typed far memory: a farmem.Memory, its allocator, its
// far-lock node (made on the first Locked operation), and the scratch buffers and batch that
// make loads allocation-free. Like the Memory it wraps, it belongs to one goroutine; the
// far values themselves (Ptr, Uint64, …) are plain values that any client may use.
//
// A client also remembers, per out-of-place pointer, the block it last saw there, so that its
// next Store swaps from it in one round trip; and, per single-writer pointer it owns, the
// version word. These are hints and ownership records, never shared. It asks the Memory once
// whether it reads in address order (transport.OrderedReader), which decides how it reads
// single-writer records.
type Client struct {
	m      farmem.Memory
	al     *alloc.Allocator
	lk     *qlock.Locker
	lkOpts qlock.Options
	b      farmem.Batch
	buf    []byte
	owned  map[farmem.Addr]uint64      // single-writer pointers owned: their version word
	seen   map[farmem.Addr]farmem.Addr // out-of-place cells: the block last seen there
	stats  ClientStats
	closed bool
	// ordered: m reads in address order (transport.OrderedReader), so a single-writer record is
	// read with one Read rather than three.
	ordered bool
}

// ClientStats count what a client's operations did beyond their verbs (farmem.Stats counts
// those).
type ClientStats struct {
	// TornRetries counts single-writer loads that saw a store in progress and read again.
	TornRetries uint64
	// CASRetries counts compare-and-swaps that lost to another client and were retried
	// (Word-mode updates, out-of-place stores and updates, counter widenings).
	CASRetries uint64
	// Fenced counts Locked updates whose fencing CAS failed (the lock had been reset while this
	// client held it) and that were run again.
	Fenced uint64
}

// NewClient opens the typed-memory client of m: it formats the memory nodes if they are not
// formatted (alloc.FormatAll), and opens m's allocator (alloc.New; one round trip when there
// is nothing to adopt). m stays the caller's: Close closes the allocator, not m.
func NewClient(ctx context.Context, m farmem.Memory, opts Options) (*Client, error) {
	al, err := alloc.New(ctx, m, opts.Alloc)
	if errors.Is(err, alloc.ErrNotFormatted) {
		if err = alloc.FormatAll(ctx, m, opts.Format); err != nil {
			return nil, fmt.Errorf("far: format: %w", err)
		}
		al, err = alloc.New(ctx, m, opts.Alloc)
	}
	if err != nil {
		return nil, fmt.Errorf("far: allocator: %w", err)
	}
	or, ok := m.(transport.OrderedReader)
	return &Client{
		ordered: ok && or.ReadsInAddressOrder(),
		m:       m,
		al:      al,
		lkOpts:  opts.Lock,
		owned:   map[farmem.Addr]uint64{},
		seen:    map[farmem.Addr]farmem.Addr{},
	}, nil
}

// Memory returns the client's farmem.Memory.
func (c *Client) Memory() farmem.Memory { return c.m }

// Allocator returns the client's allocator.
func (c *Client) Allocator() *alloc.Allocator { return c.al }

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats { return c.stats }

// Close closes the client's allocator, handing what it holds to the next allocator of its
// client id (alloc.Allocator.Close). It is idempotent; the Memory stays open.
func (c *Client) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.al.Close()
}

// Scratch returns a buffer of n bytes owned by the client, for structures built on it (such as
// far/farcoll's): it is reused by the client's next operation, so it is valid only until then
// and must not be held by a batch still in flight at that point.
func (c *Client) Scratch(n int) []byte { return c.scratch(n) }

// Batch returns the client's batch, emptied, for structures built on the client: like Scratch
// it is reused by the client's next operation.
func (c *Client) Batch() *farmem.Batch { return c.batch() }

// scratch returns a buffer of n bytes, reused across operations.
func (c *Client) scratch(n int) []byte {
	if cap(c.buf) < n {
		c.buf = make([]byte, n, max(n, 2*cap(c.buf), 256))
	}
	return c.buf[:n]
}

// batch returns the client's batch, emptied.
func (c *Client) batch() *farmem.Batch {
	c.b.Reset()
	return &c.b
}

// locker returns the client's far-lock node, making it on first use.
func (c *Client) locker() (*qlock.Locker, error) {
	if c.lk == nil {
		lk, err := qlock.New(c.m, c.lkOpts)
		if err != nil {
			return nil, fmt.Errorf("far: lock node: %w", err)
		}
		c.lk = lk
	}
	return c.lk, nil
}

// remember records blk as the block last seen in cell, keeping the hint table bounded.
func (c *Client) remember(cell, blk farmem.Addr) {
	if len(c.seen) >= maxSeen {
		if _, ok := c.seen[cell]; !ok {
			clear(c.seen)
		}
	}
	c.seen[cell] = blk
}

// maxSeen bounds the out-of-place hint table; past it the table starts over (hints are only
// an optimisation).
const maxSeen = 1 << 14

// alloc allocates size bytes aligned to 8 on node (0: the allocator's placement).
func (c *Client) alloc(ctx context.Context, node farmem.NodeID, size uint64) (farmem.Addr, error) {
	if node == 0 {
		return c.al.Alloc(ctx, size, 8)
	}
	return c.al.AllocOn(ctx, node, size, 8)
}
