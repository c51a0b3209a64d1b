package lincheck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Outcome is how an operation ended, as far as the checker is concerned.
type Outcome uint8

const (
	// OK: the operation returned and its output is checked against the model. Its effect, if
	// any, took place at one instant between its call and its return.
	OK Outcome = iota
	// Done: the operation returned and took effect between its call and its return, but its
	// output is not checked (the structure reports nothing, such as a blind set add).
	Done
	// Failed: the operation definitely had no effect (it was rejected before anything was
	// applied). It is left out of the history. Only use it when that is guaranteed: an
	// operation recorded Failed that did take effect makes a correct structure fail.
	Failed
	// Unknown: the operation may or may not have taken effect (ErrNodeDown, a context error, a
	// crashed client, or an operation still pending when the history was checked). It may be
	// linearized at any instant after its call, or not at all; its output is not checked.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Done:
		return "done"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Rejections are the sentinels with which a single verb fails without having been applied. Pass
// them to [Classify] or [Op.End] as the definite errors of an operation that is exactly one
// verb (or one batch, which applies nothing when an op of it is rejected). Do not pass them for
// an operation of several round trips: its earlier round trips may have taken effect.
var Rejections = []error{
	farmem.ErrOutOfRange, farmem.ErrMisaligned, farmem.ErrInvalid, farmem.ErrAborted,
	farmem.ErrAtomicOverlap, farmem.ErrNotSupported, farmem.ErrNotLocal, farmem.ErrNoHandler,
}

// Classify says what an operation that returned err did:
//   - nil: OK;
//   - farmem.ErrNodeDown, farmem.ErrClosed, context.Canceled or context.DeadlineExceeded
//     anywhere in err's chain: Unknown, whatever else err wraps;
//   - an error that wraps one of definite: Failed;
//   - anything else: Unknown.
//
// Treating an error as Unknown is always sound (it only weakens the check); treating it as
// Failed is sound only if the operation certainly had no effect, so that must be asked for, by
// naming the errors in definite.
func Classify(err error, definite ...error) Outcome {
	if err == nil {
		return OK
	}
	for _, u := range [...]error{farmem.ErrNodeDown, farmem.ErrClosed, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, u) {
			return Unknown
		}
	}
	for _, d := range definite {
		if d != nil && errors.Is(err, d) {
			return Failed
		}
	}
	return Unknown
}

// Record is one operation of a history: who ran it, when it was called and returned (fabric
// time, nanoseconds), its input and output, and its outcome. Return and Out are ignored when
// the outcome is Unknown or Failed. Build hand-written histories with [History.Add].
type Record[I, O any] struct {
	// Client labels the client that ran the operation (for example its farmem.ClientID).
	Client  int
	Call    farmem.Time
	Return  farmem.Time
	In      I
	Out     O
	Outcome Outcome
}

// rec is a Record as a client buffer holds it.
type rec[I, O any] struct {
	Record[I, O]
	ended bool
}

// History collects the operations of many clients for one model. Each client records into its
// own buffer ([History.Client]), so recording takes no shared lock; timestamps come from the
// fabric clock. A History may be checked while clients still run: operations not yet ended
// then count as Unknown.
type History[I, O any] struct {
	model *Model[I, O]
	clock func() farmem.Time

	mu      sync.Mutex
	clients []*Client[I, O]
	byLabel map[int]*Client[I, O]
	added   []Record[I, O]
	misuse  []string
}

// NewHistory returns an empty history of m's operations whose timestamps come from rt's clock.
// On the wall-clock runtime of real transports ([transport.WallRuntime]) it reads Go's monotonic
// clock, anchored to rt.Now() once, so that a step of the system clock cannot reorder
// operations; on the simulator it reads virtual time, so histories are exact. rt may be nil
// for histories built only with [History.Add].
func NewHistory[I, O any](m *Model[I, O], rt farmem.Runtime) *History[I, O] {
	h := &History[I, O]{model: m, byLabel: make(map[int]*Client[I, O])}
	switch r := rt.(type) {
	case nil, *transport.WallRuntime:
		var anchor farmem.Time
		if r != nil {
			anchor = r.Now()
		} else {
			anchor = farmem.Time(time.Now().UnixNano())
		}
		base := time.Now()
		h.clock = func() farmem.Time { return anchor + farmem.Time(time.Since(base)) }
	default:
		h.clock = rt.Now
	}
	return h
}

// NewHistory returns an empty history of m's operations; see the function [NewHistory].
func (m *Model[I, O]) NewHistory(rt farmem.Runtime) *History[I, O] { return NewHistory(m, rt) }

// Model returns the model the history is checked against.
func (h *History[I, O]) Model() *Model[I, O] { return h.model }

// Client returns the recorder of the client labelled id (for example int(m.Info().ID)),
// creating it on first use. Give each goroutine its own: a recorder is safe for concurrent use,
// but its operations are then serialized on one uncontended lock.
func (h *History[I, O]) Client(id int) *Client[I, O] {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.byLabel[id]; c != nil {
		return c
	}
	c := &Client[I, O]{h: h, label: id, index: len(h.clients)}
	h.clients = append(h.clients, c)
	h.byLabel[id] = c
	return c
}

// Add appends hand-written operations with explicit times. An operation whose Outcome is
// Unknown needs no Return.
func (h *History[I, O]) Add(rs ...Record[I, O]) {
	h.mu.Lock()
	h.added = append(h.added, rs...)
	h.mu.Unlock()
}

// Records returns a snapshot of every operation recorded so far, clients in creation order,
// then the added ones. Operations not yet ended have Outcome Unknown.
func (h *History[I, O]) Records() []Record[I, O] {
	rs, _ := h.snapshot()
	return rs
}

// snapshot returns the records and any misuse seen so far.
func (h *History[I, O]) snapshot() ([]Record[I, O], []string) {
	h.mu.Lock()
	clients := append([]*Client[I, O](nil), h.clients...)
	added := append([]Record[I, O](nil), h.added...)
	misuse := append([]string(nil), h.misuse...)
	h.mu.Unlock()
	var out []Record[I, O]
	for _, c := range clients {
		c.mu.Lock()
		for _, ch := range c.chunks {
			for _, r := range ch {
				if !r.ended {
					r.Outcome = Unknown
				}
				out = append(out, r.Record)
			}
		}
		c.mu.Unlock()
	}
	return append(out, added...), misuse
}

func (h *History[I, O]) misused(format string, args ...any) {
	h.mu.Lock()
	if len(h.misuse) < 20 {
		h.misuse = append(h.misuse, fmt.Sprintf(format, args...))
	}
	h.mu.Unlock()
}

// Client records the operations of one client into its own buffer.
type Client[I, O any] struct {
	h     *History[I, O]
	label int
	index int

	mu     sync.Mutex
	chunks [][]rec[I, O] // full chunks of chunkSize, then the current one
	n      int
}

// chunkSize is how many records a client buffer chunk holds; chunks are never copied.
const chunkSize = 256

func (c *Client[I, O]) at(i int) *rec[I, O] { return &c.chunks[i/chunkSize][i%chunkSize] }

// ID returns the client's label.
func (c *Client[I, O]) ID() int { return c.label }

// Call records the call of an operation with input in, timestamped now, and returns the handle
// that records its end. Call it just before the operation's first verb is issued.
func (c *Client[I, O]) Call(in I) Op[I, O] {
	now := c.h.clock()
	c.mu.Lock()
	if c.n%chunkSize == 0 {
		c.chunks = append(c.chunks, make([]rec[I, O], 0, chunkSize))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, rec[I, O]{Record: Record[I, O]{Client: c.label, Call: now, In: in}})
	i := c.n
	c.n++
	c.mu.Unlock()
	return Op[I, O]{c: c, i: i}
}

// Op is the handle of one recorded call. End it exactly once, right after the operation
// returned, with Return, Done, Fail, Unknown or End. An Op never ended counts as Unknown.
type Op[I, O any] struct {
	c *Client[I, O]
	i int
}

func (o Op[I, O]) end(out O, oc Outcome) {
	if o.c == nil {
		return
	}
	now := o.c.h.clock()
	c := o.c
	c.mu.Lock()
	r := c.at(o.i)
	if r.ended {
		c.mu.Unlock()
		c.h.misused("client %d ended operation %d (%s) twice", c.label, o.i, c.h.model.describeIn(r.In))
		return
	}
	r.ended, r.Return, r.Outcome = true, now, oc
	if oc == OK {
		r.Out = out
	}
	c.mu.Unlock()
}

// Return records that the operation returned out (checked against the model).
func (o Op[I, O]) Return(out O) { o.end(out, OK) }

// Done records that the operation returned and took effect, without checking its output.
func (o Op[I, O]) Done() { var z O; o.end(z, Done) }

// Fail records that the operation definitely had no effect; it is left out of the history.
func (o Op[I, O]) Fail() { var z O; o.end(z, Failed) }

// Unknown records that the operation may or may not have taken effect: it may be linearized at
// any instant after its call, or not at all.
func (o Op[I, O]) Unknown() { var z O; o.end(z, Unknown) }

// End records the end of an operation that returned out and err: with [Classify](err,
// definite...) it is OK (out is checked), Failed or Unknown. It returns that outcome, so that a
// client may stop after an Unknown one as a crashed client would. Map errors that are results
// of the operation (an insert's "exists") to outputs before calling End: any other error counts
// as Unknown unless named in definite.
func (o Op[I, O]) End(out O, err error, definite ...error) Outcome {
	oc := Classify(err, definite...)
	o.end(out, oc)
	return oc
}
