package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Epoch is virtual time zero: a simulation's clock starts at this Unix time (2025-01-01 UTC),
// so fabric times and context deadlines read as ordinary dates.
var Epoch = farmem.Time(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())

// Sim is a simulated cluster in virtual time. It implements farmem.Fabric (hosting every
// compute node) and transport.FaultInjector. See the package doc.
type Sim struct {
	m    Model
	seed uint64
	topo farmem.Topology
	rt   *rtime

	// Scheduler state; the token protects what is not atomic or under mu.
	nowNs int64
	heap  evQueue
	seq   uint64
	ready ring
	cur   atomic.Pointer[proc]
	// stand is the goroutine running due events on behalf of cur, a coroutine that blocked
	// (drive runs them on its own stack): calls into the simulator from those events are
	// cur's, as if cur ran them itself.
	stand        atomic.Uintptr
	anchors      int // anchors waiting (see sched.go)
	procs        int
	foreignProcs int // procs and timers started from outside, alive
	mainProc     *proc
	quiet        []*proc // goroutines from outside waiting for quiet to return
	driver       *proc   // the watchdog, while it drives
	exited       *proc   // the proc a returning coroutine picked to run next

	mu         sync.Mutex // running, inbox, adoptPool
	running    bool
	entries    uint64 // calls from outside so far
	watchArmed bool
	inbox      []*proc
	inboxN     atomic.Int32
	adoptPool  []*proc

	mem     []*node // by memory node id; [0] unused
	comp    []*node // by compute id; [0] unused
	jitter  *rand.Rand
	streams atomic.Uint64

	groups     []*group // free list
	clients    *transport.Registry[*client]
	closed     atomic.Bool
	links      map[linkKey]*linkState
	partitions map[partKey]bool

	statsFrom  int64 // virtual time the statistics window started
	verbHist   *histogram
	baseClosed farmem.Stats
}

var (
	_ farmem.Fabric           = (*Sim)(nil)
	_ transport.FaultInjector = (*Sim)(nil)
)

// New returns a simulated cluster described by model, whose every choice (ties between
// simultaneous events, jitter, random sources) derives from seed: a run is a pure function of
// (model, seed, program).
func New(model Model, seed uint64) (*Sim, error) {
	if err := model.defaults(); err != nil {
		return nil, err
	}
	s := &Sim{
		m:          model,
		seed:       seed,
		clients:    transport.NewRegistry[*client](model.ClientsPerNode, model.SliceSize, model.MaxHandlers),
		links:      make(map[linkKey]*linkState),
		partitions: make(map[partKey]bool),
		verbHist:   newHistogram(),
	}
	s.heap.rng = seed*0x9e3779b97f4a7c15 | 1
	s.nowNs = int64(Epoch)
	s.statsFrom = s.nowNs
	s.jitter = rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908))
	s.rt = s.newRtime(nil, clock{})
	s.topo = model.Topology(model.DownTimeout)
	s.mem = make([]*node, model.MemoryNodes+1)
	s.comp = make([]*node, model.ComputeNodes+1)
	for _, info := range s.topo.Nodes {
		if info.Role == farmem.RoleMemory {
			s.mem[info.ID] = s.newNode(info.ID, info.Size, &s.m.MemoryNIC)
			continue
		}
		n := s.newNode(info.ID, info.Size, &s.m.ComputeNIC)
		s.initCompute(n)
		s.comp[info.ID.ComputeID()] = n
	}
	if model.CoLocated && model.MemoryNodes > 0 {
		for i, n := range s.comp[1:] {
			m := s.mem[i%model.MemoryNodes+1]
			n.nic, n.model, n.sharesNIC = m.nic, m.model, true
		}
	}
	return s, nil
}

// Model returns the model the simulation runs (with defaults filled in).
func (s *Sim) Model() Model { return s.m }

// Seed returns the simulation's seed.
func (s *Sim) Seed() uint64 { return s.seed }

// Now returns the current virtual time.
// From outside the simulation it waits, like every call, for the simulation to be quiet.
func (s *Sim) Now() farmem.Time {
	p, adopted := s.enter()
	t := s.nowNs
	s.exit(p, adopted)
	return farmem.Time(t)
}

// Elapsed returns the virtual time since the simulation started.
func (s *Sim) Elapsed() time.Duration { return s.Now().Sub(Epoch) }

// Topology implements farmem.Fabric.
func (s *Sim) Topology() *farmem.Topology { return &s.topo }

// Hosted implements farmem.Fabric: the simulation hosts every compute node.
func (s *Sim) Hosted() []farmem.NodeID { return s.topo.ComputeNodes() }

// Runtime implements farmem.Fabric: the simulation's clock, scheduler and random sources.
// Compute on it charges no compute node (it only takes the time); a client's runtime charges
// the client's node.
func (s *Sim) Runtime() farmem.Runtime { return s.rt }

// Stats implements farmem.Fabric: the sum over every client opened so far, handler clients
// included.
func (s *Sim) Stats() farmem.Stats { return s.clients.Stats() }

// node returns the node with id, or nil.
// sizeOf returns the size of node id's region.
func (s *Sim) sizeOf(id farmem.NodeID) (uint64, error) {
	if n := s.node(id); n != nil {
		return n.size, nil
	}
	return 0, transport.NoSuchNode(id)
}

func (s *Sim) node(id farmem.NodeID) *node {
	if id.IsCompute() {
		if c := int(id.ComputeID()); c > 0 && c < len(s.comp) {
			return s.comp[c]
		}
		return nil
	}
	if int(id) > 0 && int(id) < len(s.mem) {
		return s.mem[id]
	}
	return nil
}

// Open implements farmem.Fabric.
func (s *Sim) Open(ctx context.Context, id farmem.NodeID) (farmem.Memory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	n, err := s.computeNode(id)
	if err != nil {
		return nil, err
	}
	return s.openClient(n, -1)
}

func (s *Sim) computeNode(id farmem.NodeID) (*node, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("sim: fabric: %w", farmem.ErrClosed)
	}
	n := s.node(id)
	if n == nil || n.c == nil {
		return nil, fmt.Errorf("sim: %v is not a compute node of this fabric: %w", id, farmem.ErrInvalid)
	}
	if n.state == stateCrashed {
		return nil, fmt.Errorf("sim: %v: %w", id, farmem.ErrNodeDown)
	}
	return n, nil
}

// Handle implements farmem.Fabric.
func (s *Sim) Handle(id farmem.NodeID, method uint16, h farmem.Handler) error {
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	n, err := s.computeNode(id)
	if err != nil {
		return err
	}
	return transport.SetHandler(n.c.handlers, method, h)
}

// Close implements farmem.Fabric: every client is closed and every node stops serving. Procs
// still blocked in the simulation stay blocked.
func (s *Sim) Close() error {
	if s.closed.Load() {
		return nil
	}
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	if s.closed.Swap(true) {
		return nil
	}
	cs, _ := s.clients.Close()
	for _, c := range cs {
		c.close()
	}
	for _, n := range s.mem[1:] {
		n.state = stateCrashed
	}
	for _, n := range s.comp[1:] {
		s.crashNode(n)
	}
	return nil
}

// Run runs f inside the simulation, in the calling goroutine, and returns when f does. While
// f waits in the simulator, virtual time advances and the procs it started run; when f returns,
// time stops where it is and background procs stay parked until the next Run or call. Inside
// f, wait for procs with Group, never with sync.WaitGroup or channels: a goroutine blocked
// outside the simulator stalls it. A run is deterministic when nothing outside it calls into
// the simulation meanwhile. If every proc blocks with no event pending, f's blocked call fails
// with ErrDeadlock.
func (s *Sim) Run(f func()) {
	p, adopted := s.enter()
	if !adopted {
		f()
		return
	}
	defer s.exit(p, adopted)
	outer := s.mainProc
	p.main = true
	s.mainProc = p
	defer func() { s.mainProc = outer }()
	f()
}

// Go starts f in a new simulated goroutine (see Runtime.Go).
func (s *Sim) Go(f func()) { s.rt.Go(f) }

// At runs f in a new simulated goroutine at virtual time t (at once if t has passed); f may
// inject faults, issue verbs and block. It is how a fault schedule is written:
//
//	s.At(sim.Epoch.Add(5*time.Millisecond), func() { _ = s.Crash(farmem.NodeID(2)) })
//
// The event does not make time advance by itself: it fires when the run reaches t. It returns
// a Timer that can cancel it.
func (s *Sim) At(t farmem.Time, f func()) farmem.Timer {
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	return s.newTimer(max(int64(t), s.nowNs), false, func() { s.spawn(f, false) })
}

// newRand returns a new random source derived from the seed and a counter.
func (s *Sim) newRand() *rand.Rand {
	r := new(rand.Rand)
	s.initRand(r, new(rand.PCG))
	return r
}

// initRand makes r a new random source derived from the seed and a counter, drawing from pcg.
func (s *Sim) initRand(r *rand.Rand, pcg *rand.PCG) {
	n := s.streams.Add(1)
	pcg.Seed(s.seed, n*0x9e3779b97f4a7c15)
	*r = *rand.New(pcg)
}
