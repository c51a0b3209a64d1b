package rdma

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// ServerOptions configure a memory node.
type ServerOptions struct {
	// Node is the memory node's id, 1..farmem.MaxMemoryNode.
	Node farmem.NodeID
	// Size is the region's size in bytes (rounded down to a multiple of 8).
	Size uint64
	// Backing says where the memory lives:
	//	"anon" (or "")      anonymous memory (mmap)
	//	"shm:NAME"          a file /dev/shm/NAME, created, and removed on Close
	//	"file:PATH"         a regular file, created or truncated (old contents are discarded)
	//	"devdax:/dev/daxX.Y" a device-DAX character device (size 0: the whole device)
	// The node always serves zeroed memory and never writes it itself.
	Backing string
	// Secret is the cluster secret clients must prove (at least MinSecret bytes).
	Secret []byte
	// Provider is the data path: "tcp" (the default) or "ibverbs" (a build with -tags rdma:
	// the region is registered with the RDMA NIC, which serves clients' verbs by itself).
	Provider string
	// Device is the RDMA device port the ibverbs provider uses, "NAME[:PORT[:GID-INDEX]]"
	// (default: the DeviceEnv variable, else the first device, port 1, GID chosen automatically).
	Device string
	// NoRegistry turns off the compute membership every memory node keeps by default (the
	// cluster file's registry node needs it; it costs nothing on the others).
	NoRegistry bool
	// AllowFaults lets authenticated clients inject faults into the node through a control
	// request (RemoteFault), so fault tests can drive a separate farmemd process. Never for
	// production.
	AllowFaults bool
	// Logger receives structured logs (default: none are written). Lines a stranger or a
	// misbehaving client can cause at will (refused handshakes, protocol violations, clients
	// that do not read) are rate-limited per kind and report how many were suppressed.
	Logger *slog.Logger
	// MaxConns bounds authenticated connections (default 4096); MaxOutstanding the requests a
	// client may have unanswered on one connection (default 1024). A frame's payload is limited
	// to wire.DefaultMaxFrame; clients split larger batches into several frames.
	MaxConns       int
	MaxOutstanding int
	// MaxUnauth bounds the connections still in their handshake (default 256), apart from
	// MaxConns: when it is reached, a new connection pushes out the oldest one that has not
	// yet sent a hello (else the oldest), so connections that never speak cannot lock out a
	// client that holds the secret.
	MaxUnauth int
	// MaxBuffer bounds each of the node's two shared buffer budgets (default 64 MiB, at least
	// one largest frame): request payloads over 32 KiB, and replies over 32 KiB. A connection
	// that would exceed one waits, reading nothing from its client meanwhile.
	MaxBuffer int64
	// HandshakeTimeout bounds a connection's handshake (default 2s); WriteTimeout a write to a
	// client that does not read, and the arrival of a large request's payload (default 10s).
	// A connection that exceeds either is closed.
	HandshakeTimeout time.Duration
	WriteTimeout     time.Duration
}

func (o *ServerOptions) limits() (limits, error) {
	l := limits{maxConns: o.MaxConns, maxOutstanding: o.MaxOutstanding, maxFrame: wire.DefaultMaxFrame,
		handshake: o.HandshakeTimeout, writeTimeout: o.WriteTimeout, maxUnauth: o.MaxUnauth, maxBuffer: o.MaxBuffer}
	if l.maxConns == 0 {
		l.maxConns = 4096
	}
	if l.maxOutstanding == 0 {
		l.maxOutstanding = 1024
	}
	if l.maxConns < 0 || l.maxOutstanding < 0 || l.handshake < 0 || l.writeTimeout < 0 || l.maxUnauth < 0 || l.maxBuffer < 0 {
		return l, fmt.Errorf("rdma: server limits %+v: %w", l, farmem.ErrInvalid)
	}
	return l, nil
}

// Server is a memory node: it owns a region and serves verbs on it to authenticated clients,
// with no application logic.
//
// Its memory is bounded whatever clients send. Beyond the region, it holds at most
// ConnBufferBound bytes (144 KiB) per authenticated connection, a few KiB per connection in
// its handshake, and the two shared budgets of MaxBuffer bytes each, so at most
// MaxConns×ConnBufferBound + MaxUnauth×8 KiB + 2×MaxBuffer of buffers (about 710 MiB at the
// defaults, 2×MaxBuffer+ConnBufferBound for one busy client). A batch whose results would exceed
// the frame limit is refused per op (wire.ErrReplyTooLarge); a client that sends without
// reading meets backpressure (the node stops reading it) and, after WriteTimeout, a close. It is what farmemd runs, and tests run it in-process. Its fault
// methods (Crash, Hang, Resume, Partition, Heal, CrashAfter) inject faults for tests.
type Server struct {
	s  *srv
	sp serverProvider
	mu sync.Mutex
	// closed is set by Close.
	closed bool
	err    error
}

// NewServer maps the node's memory. Serve or Listen makes it reachable.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Node == 0 || opts.Node > farmem.MaxMemoryNode {
		return nil, fmt.Errorf("rdma: memory node id %d: %w", opts.Node, farmem.ErrInvalid)
	}
	if len(opts.Secret) < MinSecret {
		return nil, fmt.Errorf("rdma: cluster secret of %d bytes, want at least %d: %w", len(opts.Secret), MinSecret, farmem.ErrInvalid)
	}
	var sp serverProvider
	if opts.Provider != "" && opts.Provider != "tcp" {
		mk := serverProviders[opts.Provider]
		if mk == nil {
			_, err := lookupProvider(opts.Provider)
			if err == nil {
				err = fmt.Errorf("rdma: provider %q has no memory-node half: %w", opts.Provider, farmem.ErrNotSupported)
			}
			return nil, err
		}
		sp = mk()
	}
	lim, err := opts.limits()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg, err := mapBacking(opts.Backing, opts.Size)
	if err != nil {
		return nil, err
	}
	s := newSrv(opts.Node, reg, append([]byte(nil), opts.Secret...), log.With("node", opts.Node.String()), lim)
	if opts.Provider != "" {
		s.provider = opts.Provider
	}
	s.device = opts.Device
	if !opts.NoRegistry {
		s.members = newRegistry()
	}
	if opts.AllowFaults {
		s.allowFaults = true
		log.Warn("fault injection through control requests is enabled: for tests only")
	}
	if sp != nil {
		if err := sp.attach(s); err != nil {
			_ = reg.release()
			return nil, err
		}
	}
	return &Server{s: s, sp: sp}, nil
}

// Listen listens on addr (host:port; use 127.0.0.1:0 for a free loopback port) and serves in
// the background. It returns the address bound.
func (sv *Server) Listen(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("rdma: listen: %w", err)
	}
	// Logged before the goroutine starts: a caller that closes the server at once (a failed
	// start) and then reads its log must not race with it.
	sv.logServing(ln)
	go sv.s.serve(ln)
	return ln.Addr().String(), nil
}

// Serve serves connections from ln until the server closes or crashes.
func (sv *Server) Serve(ln net.Listener) {
	sv.logServing(ln)
	sv.s.serve(ln)
}

func (sv *Server) logServing(ln net.Listener) {
	sv.s.log.Info("serving", "addr", ln.Addr().String(), "size", sv.s.reg.size, "backing", sv.s.reg.desc, "provider", sv.s.provider)
}

// Addr returns the address the server listens on, or "" before Listen or Serve.
func (sv *Server) Addr() string {
	sv.s.mu.Lock()
	defer sv.s.mu.Unlock()
	if sv.s.ln == nil {
		return ""
	}
	return sv.s.ln.Addr().String()
}

// Node returns the memory node's id.
func (sv *Server) Node() farmem.NodeID { return sv.s.node }

// Size returns the region's size in bytes.
func (sv *Server) Size() uint64 { return sv.s.reg.size }

// Status returns the node's health and counters, as its info request reports them.
func (sv *Server) Status() NodeStatus { return sv.s.status() }

// Close stops serving, waits for every connection to end, and unmaps the region. It is
// idempotent.
func (sv *Server) Close() error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.closed {
		return sv.err
	}
	sv.closed = true
	sv.s.shutdown()
	sv.s.wait()
	if sv.sp != nil {
		sv.err = sv.sp.detach()
	}
	if err := sv.s.reg.release(); sv.err == nil {
		sv.err = err
	}
	sv.s.log.Info("closed")
	return sv.err
}

// Crash makes the node fail-stop as an injected fault: it stops listening and drops every
// connection at once, so clients get ErrNodeDown immediately. Close still releases it.
func (sv *Server) Crash() { sv.s.crash() }

// Hang makes the node fail-silent: it reads and drops every frame and answers nothing, so
// clients' ops fail with ErrNodeDown after their down timeout, unapplied.
func (sv *Server) Hang() error { return sv.s.hang() }

// Resume ends a Hang. Connections that lost frames to it are closed.
func (sv *Server) Resume() error { return sv.s.resume() }

// Partition drops client's traffic (fail-silent for that client only) until Heal.
func (sv *Server) Partition(client farmem.ClientID) { sv.s.partition(client, true) }

// Heal ends a Partition.
func (sv *Server) Heal(client farmem.ClientID) { sv.s.partition(client, false) }

// CrashAfter arms the node so that the next batch frame reaching it applies only its first n
// ops, answers for those, and then the node crashes.
func (sv *Server) CrashAfter(n int) error { return sv.s.armCrashAfter(n) }

// Fault is a fault to inject into a node started with AllowFaults.
type Fault struct {
	// Kind is "partition", "heal" or "crash-after".
	Kind string `json:"kind"`
	// Client is the client a partition cuts off or a heal restores.
	Client farmem.ClientID `json:"client,omitempty"`
	// N is the number of ops the next batch applies before the node crashes (crash-after).
	N int `json:"n,omitempty"`
}

// RemoteFault injects a fault into the node at addr, which must have been started with
// AllowFaults (farmemd --allow-faults); others refuse with farmem.ErrNotSupported.
func RemoteFault(ctx context.Context, addr string, secret []byte, f Fault) error {
	c := &ctlConn{p: &peer{addr: addr, ready: make(chan struct{})}, secret: secret, down: 5 * time.Second}
	defer c.close()
	return c.rpc(ctx, wire.CtlFault, f, nil)
}

// fault applies a Fault a control request asked for.
func (s *srv) fault(body []byte) (any, error) {
	if !s.allowFaults {
		return nil, fmt.Errorf("rdma: %v does not allow fault injection: %w", s.node, farmem.ErrNotSupported)
	}
	var f Fault
	if err := wire.DecodeJSON(body, &f); err != nil {
		return nil, err
	}
	s.log.Warn("injecting a fault on request", "kind", f.Kind, "client", f.Client, "n", f.N)
	switch f.Kind {
	case "partition":
		s.partition(f.Client, true)
	case "heal":
		s.partition(f.Client, false)
	case "crash-after":
		return struct{}{}, s.armCrashAfter(f.N)
	default:
		return nil, fmt.Errorf("rdma: unknown fault %q: %w", f.Kind, farmem.ErrInvalid)
	}
	return struct{}{}, nil
}
