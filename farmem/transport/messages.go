package transport

import (
	"context"
	"fmt"
	"sync"

	"github.com/farmem/farmem/farmem"
)

// SetHandler is the one rule of farmem.Fabric's Handle, on a node's table m of handlers by
// method: fn is registered for method unless method already has a handler (refused with
// ErrInvalid, naming the method's owner, so two structures cannot silently take each other's
// Calls); a nil fn removes method's handler, and fails with ErrInvalid if there is none. The
// caller holds whatever lock guards m.
func SetHandler(m map[uint16]farmem.Handler, method uint16, fn farmem.Handler) error {
	_, had := m[method]
	switch {
	case fn == nil && !had:
		return fmt.Errorf("farmem: no handler for method %s to remove: %w", MethodName(method), farmem.ErrInvalid)
	case fn == nil:
		delete(m, method)
	case had:
		return fmt.Errorf("farmem: method %s already has a handler on this node (remove it first to replace it): %w",
			MethodName(method), farmem.ErrInvalid)
	default:
		m[method] = fn
	}
	return nil
}

// CheckSend validates a one-way message's target and request, as [CheckCall] does a Call's:
// a compute node, and a request of at most farmem.MaxCallBytes.
func CheckSend(node farmem.NodeID, req []byte) error {
	switch {
	case !node.IsCompute():
		return fmt.Errorf("farmem: send to memory node %v: %w", node, farmem.ErrInvalid)
	case len(req) > farmem.MaxCallBytes:
		return fmt.Errorf("farmem: message of %d bytes exceeds %d: %w", len(req), farmem.MaxCallBytes, farmem.ErrInvalid)
	}
	return nil
}

// counted is what a transport's client has when it embeds [ClientState].
type counted interface{ counters() *Counters }

func (s *ClientState) counters() *Counters { return &s.Counters }

// ServeMessage runs method's handler for a one-way message from client from, on a handler
// client of the node (waiting for a free one, or until nodeCtx ends: then the message is
// dropped). The reply is discarded; a failure (no handler, the handler's error or panic) is
// counted in the MessageFailures of the handler client that took the message, when the
// transport's client embeds [ClientState]. It reports whether the handler ran and succeeded.
func (h *Handlers[C]) ServeMessage(nodeCtx context.Context, method uint16, from farmem.ClientID, req []byte) bool {
	var hc C
	select {
	case hc = <-h.pool:
	case <-nodeCtx.Done():
		return false
	}
	defer func() { h.pool <- hc }()
	fn := h.Get(method)
	ok := false
	if fn != nil {
		_, err := RunHandler(nodeCtx, fn, hc, from, req)
		ok = err == nil
	}
	if !ok {
		if c, is := any(hc).(counted); is {
			c.counters().CountMessageFailure()
		}
	}
	return ok
}

// Message is one one-way message in an [Inbox].
type Message struct {
	From   farmem.ClientID
	Method uint16
	Req    []byte
	// Done, if set, runs once the message has been handled or dropped (a transport acknowledges
	// it there, freeing the sender's window).
	Done func()
}

// Inbox is a compute node's queue of one-way messages, for transports on the wall clock. It
// keeps one FIFO lane per sending client and runs each lane's messages one at a time, in
// order, on a goroutine of its own that lives while the lane is not empty; lanes run
// concurrently, and each message's handler takes a handler client ([Handlers.ServeMessage]),
// so at most MaxHandlers run at once. It is bounded: at most maxMsgs messages and maxBytes
// request bytes are queued or running at once, and [Inbox.Put] waits for room.
//
// Costs: Put and the end of a message each take the inbox's mutex once; a lane's goroutine is
// started when the lane goes from empty to not empty.
type Inbox struct {
	run              func(Message)
	maxMsgs, maxByte int

	mu     sync.Mutex
	lanes  map[farmem.ClientID][]Message
	n      int
	bytes  int
	room   chan struct{} // closed and replaced whenever a message leaves
	closed bool
}

// Default bounds of an inbox: enough for bursts of invalidations from every peer, small
// enough that a flood costs a node a few megabytes at most.
const (
	InboxMessages = 4096
	InboxBytes    = 4 * farmem.MaxCallBytes
)

// NewInbox returns an inbox that runs each message with run (which typically calls
// [Handlers.ServeMessage]) and queues at most maxMsgs messages and maxBytes bytes (a message
// larger than maxBytes is still taken when the inbox is empty).
func NewInbox(maxMsgs, maxBytes int, run func(Message)) *Inbox {
	return &Inbox{run: run, maxMsgs: maxMsgs, maxByte: maxBytes, lanes: make(map[farmem.ClientID][]Message),
		room: make(chan struct{})}
}

// Put queues m behind the earlier messages of its sender. If the inbox is full it waits for
// room, until ctx ends or stop is closed (the node went down: ErrNodeDown). After Close it
// fails with ErrNodeDown.
func (in *Inbox) Put(ctx context.Context, stop <-chan struct{}, m Message) error {
	for {
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			return fmt.Errorf("farmem: message to a node that stopped: %w", farmem.ErrNodeDown)
		}
		if in.n == 0 || (in.n < in.maxMsgs && in.bytes+len(m.Req) <= in.maxByte) {
			in.n++
			in.bytes += len(m.Req)
			q := in.lanes[m.From]
			in.lanes[m.From] = append(q, m)
			start := len(q) == 0
			in.mu.Unlock()
			if start {
				go in.drain(m.From)
			}
			return nil
		}
		room := in.room
		in.mu.Unlock()
		select {
		case <-room:
		case <-stop:
			return fmt.Errorf("farmem: message to a node that stopped: %w", farmem.ErrNodeDown)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drain runs lane from's messages in order until it is empty.
func (in *Inbox) drain(from farmem.ClientID) {
	for {
		in.mu.Lock()
		q := in.lanes[from]
		if len(q) == 0 || in.closed {
			delete(in.lanes, from)
			in.mu.Unlock()
			if len(q) > 0 && q[0].Done != nil {
				q[0].Done() // closed before it ran: dropped
			}
			return
		}
		m := q[0]
		in.mu.Unlock()
		in.run(m)
		if m.Done != nil {
			m.Done()
		}
		in.mu.Lock()
		q = in.lanes[from]
		if len(q) > 0 {
			q[0] = Message{}
			q = q[1:]
		}
		// An emptied lane is deleted under the same lock that popped its last message, and
		// this goroutine ends: the next Put finds no lane and starts a new one. (Kept, an empty
		// lane let a Put in before this goroutine looked again, and both ran the lane.)
		if len(q) == 0 {
			delete(in.lanes, from)
		} else {
			in.lanes[from] = q
		}
		in.n--
		in.bytes -= len(m.Req)
		close(in.room)
		in.room = make(chan struct{})
		in.mu.Unlock()
		if len(q) == 0 {
			return
		}
	}
}

// Close drops the queued messages (running ones finish) and makes later Puts fail. Dropped
// messages' Done still runs. It is idempotent.
func (in *Inbox) Close() {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	in.closed = true
	var dropped []Message
	for from, q := range in.lanes {
		if len(q) > 1 {
			dropped = append(dropped, q[1:]...)
			in.lanes[from] = q[:1]
		}
	}
	close(in.room)
	in.room = make(chan struct{})
	in.mu.Unlock()
	for _, m := range dropped {
		if m.Done != nil {
			m.Done()
		}
	}
}
