package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
	"github.com/farmem/farmem/farmem/replmem"
)

// Options configure a Store. The zero value is usable: a RACE index with the default
// synchronizer, no replication, the allocator's defaults, and clients on every compute node the
// fabric hosts.
type Options struct {
	// Index is the kind of index (default Race{}). A store is reopened only with the kind that
	// created it (ErrMismatch otherwise).
	Index IndexKind
	// Sync builds each index handle's pointer synchronizer. A store has one, recorded by name
	// when it is created (synchronizers keep lock entries in the index and do not share them):
	// nil creates a store with the index kind's default (DefaultSyncOf: CIDER for RACE) and
	// opens an existing one with the one it records (SyncByName); a Sync whose name differs
	// from the recorded one is ErrMismatch, one the kind does not take (Matrix) a RefusalError.
	Sync Sync
	// Replication combines index instances (default NoReplication{}). Like Index, it is fixed
	// when the store is created.
	Replication Replicator
	// Format formats memory nodes that are not formatted yet (alloc.Format's options; the
	// defaults depend only on the topology, so processes agree). MaxClients, the largest client
	// id that can allocate, defaults to the client slots of MinComputeNodes compute nodes, or of
	// the topology's highest compute id if that is more: a cluster whose processes join later
	// (tcp without a fixed compute list) has room for them. Formatted nodes are used as they
	// are, whatever options formatted them.
	Format alloc.FormatOptions
	// Alloc configures each client's allocator: its Lease and Refresh bound how long a retired
	// KV block waits before it is reused (see the package doc, "Memory").
	Alloc alloc.Options
	// Nodes are the compute nodes the store opens clients on, in turn (default every node the
	// fabric hosts).
	Nodes []farmem.NodeID
	// MaxClients bounds the clients the store opens (default 0: as many as the fabric gives;
	// once it refuses one, the store waits for one of its own to be free).
	MaxClients int
	// Replicas is the store's replication factor r for its metadata: 1 keeps the root word,
	// descriptor, generation table and the allocator's shared tables on the home node (a
	// single point of failure); an odd r = 2f+1 (at most the number of memory nodes and
	// alloc.MaxMetaReplicas) keeps them on r memory nodes, on a majority, so the store opens
	// and runs with any f of them down, the first included (see "Replicated metadata" in the
	// package doc). It is chosen when the store is created, by formatting the nodes with it
	// (Format.Replicas is set from it), and recorded in the nodes' headers and the
	// descriptor. 0 takes what the store records (1 for a new store); any other value that
	// differs from the record fails Open with ErrMismatch. Replicating the index itself is the
	// index kind's affair.
	Replicas int
	// NoCreate makes Open fail with ErrNoStore, writing nothing, when the fabric holds no store
	// (instead of formatting it and creating one).
	NoCreate bool
	// Lease is how long a client creating the store holds its claim on the root word before
	// another may take over (default 1s of fabric time); ClockSkew bounds the difference
	// between clients' clocks (default 1ms).
	Lease     time.Duration
	ClockSkew time.Duration
}

// MinComputeNodes is how many compute nodes' clients the epoch table of a fabric the store
// formats has room for, at least (see Options.Format).
const MinComputeNodes = 16

func (o Options) withDefaults(f farmem.Fabric) (Options, error) {
	if o.Index == nil {
		r := Race{}
		if o.Alloc.Lease != 0 {
			// race's default pin budget assumes alloc's default lease.
			refresh, skew := o.Alloc.Refresh, o.Alloc.ClockSkew
			if refresh == 0 {
				refresh = min(10*time.Millisecond, o.Alloc.Lease/2)
			}
			if skew == 0 {
				skew = time.Millisecond
			}
			r.Options.PinBudget = max(time.Microsecond, (o.Alloc.Lease-refresh-skew)/4)
		}
		o.Index = r
	}
	if o.Replication == nil {
		o.Replication = NoReplication{}
	}
	if r := o.Replication.Replicas(); r < 1 || r > MaxReplicas {
		return o, fmt.Errorf("kvstore: %d replicas, want 1..%d: %w", r, MaxReplicas, farmem.ErrInvalid)
	}
	if o.Nodes == nil {
		for _, n := range f.Hosted() {
			if n.IsCompute() {
				o.Nodes = append(o.Nodes, n)
			}
		}
	}
	if len(o.Nodes) == 0 {
		return o, fmt.Errorf("kvstore: the fabric hosts no compute node: %w", farmem.ErrInvalid)
	}
	if o.MaxClients < 0 {
		return o, fmt.Errorf("kvstore: MaxClients %d: %w", o.MaxClients, farmem.ErrInvalid)
	}
	if o.Format.MaxClients == 0 {
		t := f.Topology()
		var top farmem.ComputeID
		for _, n := range t.ComputeNodes() {
			top = max(top, n.ComputeID())
		}
		o.Format.MaxClients = min(0xffff, max(int(top), MinComputeNodes)*max(1, t.ClientsPerNode))
	}
	if o.Replicas < 0 || o.Replicas > alloc.MaxMetaReplicas || o.Replicas > 1 && o.Replicas%2 == 0 {
		return o, fmt.Errorf("kvstore: replication factor %d, want an odd number up to %d: %w", o.Replicas, alloc.MaxMetaReplicas, farmem.ErrInvalid)
	}
	if o.Replicas != 0 && o.Format.Replicas == 0 {
		o.Format.Replicas = o.Replicas
	}
	o, err := o.withIndexReplicas(f.Topology())
	if err != nil {
		return o, err
	}
	if err := checkMatrix(o, o.syncToCreate()); err != nil {
		return o, err
	}
	if o.Lease <= 0 {
		o.Lease = time.Second
	}
	if o.ClockSkew <= 0 {
		o.ClockSkew = time.Millisecond
	}
	return o, nil
}

// Store is a key-value store in far memory, safe for concurrent use by many goroutines. It
// keeps a pool of clients (each a farmem.Memory with its alloc.Allocator and index handle): an
// operation takes a free client, runs on it, and gives it back. A goroutine that runs many
// operations can hold one client with Session instead. See the package doc.
type Store struct {
	fabric farmem.Fabric
	opts   Options
	desc   Descriptor
	home   farmem.NodeID
	meta   []farmem.NodeID // the metadata nodes: [home] for r = 1 (meta.go)
	// rootWord is the ready root word found, with replicated metadata (Adopt restores it).
	rootWord RootWord
	limits   Limits
	rt       farmem.Runtime

	closed atomic.Bool

	mu       sync.Mutex // guards the pool; never held across a verb
	idle     []*conn    // free clients, most recently used last
	live     map[*conn]struct{}
	opening  int          // clients being opened
	capacity int          // most clients the store keeps (0: no bound known)
	next     int          // the node the next client is opened on, modulo len(Nodes)
	retired  farmem.Stats // counted costs of clients already closed
	finished bool         // Close has run
	waiters  []*waiter    // acquires waiting for a client, oldest first
	closers  []*waiter    // Closes waiting for the clients in use to come back
	sessions map[*conn]bool
	failed   []ClientError                   // clients whose release failed after Close began, not yet reported
	closing  int                             // clients taken out of live whose release has not ended
	ordered  bool                            // the index handles are OrderedIndexes
	nodes    *nodestate.Set[nodestate.State] // a NodeKind's per-node state (nodekind.go)

	// health is the replica suspicion of each compute node's handles (health.go).
	health map[farmem.NodeID]*replmem.Health
}

// conn is one client: its Memory, allocator and index handle.
type conn struct {
	m     farmem.Memory
	a     *alloc.Allocator
	idx   Index
	ag    AppendGetter // idx's AppendGet, if it has one (asserted once, not per Get)
	owned bool         // m was opened by the store, which closes it
	base  farmem.Stats // m's counters when the store took it
	id    farmem.ClientID
}

// close releases the client and returns its counted costs since the store took it.
func (c *conn) close() (farmem.Stats, error) {
	err := c.idx.Close()
	err = errors.Join(err, c.a.Close())
	st := c.m.Stats().Sub(c.base)
	if c.owned {
		err = errors.Join(err, c.m.Close())
	}
	return st, err
}

// Open opens the store on fabric, creating it if the fabric holds none: it formats memory nodes
// that are not formatted (alloc.Format with Options.Format), then finds the root word on the
// allocator's home node; if it is empty it claims it, creates the index instances and the
// descriptor, and publishes it (see the package doc, "Finding the store"). Several processes
// (or Stores of one process) may open the same fabric at once: they find the same store.
//
// Open opens one client (on the first of Options.Nodes) and keeps it in the pool. Cost on an
// existing store: one Read per memory node (headers), the allocator's New (1 round trip, 2–3 when it adopts a handover), the
// root word and the descriptor (2), and the index's Open (race: 2, plus a pin).
func Open(ctx context.Context, fabric farmem.Fabric, opts Options) (*Store, error) {
	o, err := opts.withDefaults(fabric)
	if err != nil {
		return nil, err
	}
	s := &Store{fabric: fabric, opts: o, limits: o.Index.Limits(), rt: fabric.Runtime(), live: map[*conn]struct{}{}, sessions: map[*conn]bool{}}
	if err := s.openNodes(ctx); err != nil {
		return nil, err
	}
	m, node, err := s.openMemory(ctx, 0)
	if err != nil {
		_ = s.closeNodes()
		return nil, err
	}
	s.next = node + 1
	c, err := s.setUp(ctx, m)
	if err != nil {
		_ = m.Close()
		_ = s.closeNodes()
		return nil, err
	}
	if err := s.checkGenerations(ctx, m, s.meta); err != nil {
		_, _ = c.close()
		_ = m.Close()
		_ = s.closeNodes()
		return nil, err
	}
	_, s.ordered = c.idx.(OrderedIndex)
	s.live[c] = struct{}{}
	s.idle = append(s.idle, c)
	return s, nil
}

// setUp formats the fabric if need be, finds or creates the store, and returns m's client.
func (s *Store) setUp(ctx context.Context, m farmem.Memory) (*conn, error) {
	hh, err := homeHeader(ctx, m)
	if err == nil {
		if s.opts.Replicas != 0 && s.opts.Replicas != hh.Replicas {
			return nil, fmt.Errorf("kvstore: the fabric is formatted with %d metadata replicas, the options say %d: %w", hh.Replicas, s.opts.Replicas, ErrMismatch)
		}
		// Before formatting: a node that restarted unacknowledged must not be formatted here.
		if err := s.checkGenerations(ctx, m, alloc.MetaNodes(m.Topology(), hh)); err != nil {
			return nil, err
		}
	}
	replicas := s.opts.Format.Replicas
	if err == nil {
		replicas = hh.Replicas
	}
	if err := s.format(ctx, m, err == nil, hh.Home, replicas); err != nil {
		return nil, err
	}
	a, err := alloc.New(ctx, m, s.opts.Alloc)
	if err != nil {
		return nil, fmt.Errorf("kvstore: allocator: %w", err)
	}
	s.home, s.meta = a.Home(), a.MetaNodes()
	if len(s.meta) > 1 {
		var create func(ctx context.Context) (Descriptor, uint64, error)
		if !s.opts.NoCreate {
			create = func(ctx context.Context) (Descriptor, uint64, error) { return s.createRep(ctx, m, a) }
		}
		var bare []farmem.NodeID
		s.desc, s.rootWord, bare, err = findOrCreateRep(ctx, m, s.meta, s.opts.Lease, s.opts.ClockSkew, create)
		// A metadata node formatted (restored) late, by format above, has no store words yet:
		// copy them, best effort (until then readers find no majority on it alone, and a
		// later Open or Adopt tries again).
		for _, n := range bare {
			if err == nil {
				peers := slices.DeleteFunc(slices.Clone(s.meta), func(x farmem.NodeID) bool { return x == n })
				_ = s.restoreMeta(ctx, m, n, peers)
			}
		}
	} else {
		var create creator
		if !s.opts.NoCreate {
			create = func(ctx context.Context) (Descriptor, farmem.Addr, error) { return s.create(ctx, m, a) }
		}
		s.desc, err = findOrCreate(ctx, m, farmem.MakeAddr(s.home, RootOffset), s.opts.Lease, s.opts.ClockSkew, create)
	}
	if err == nil {
		err = s.checkDescriptor()
	}
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	c, err := s.attach(ctx, m, a, true)
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	return c, nil
}

// format formats the memory nodes that are not formatted yet (or half formatted).
//
// alloc.Open and alloc.Format read the header in one Read, which a concurrent formatter's
// batch may interleave with (claim or magic word read before it was set, constants after they
// were written): they then take the node for one holding foreign data (alloc.ErrBadHeader).
// A node being formatted shows this only for a moment, so format retries a few times before
// it believes it.
//
// On a fabric formatted before (formatted: the home node's header was found), a node that does
// not answer is skipped: it was formatted with the others, and the store works without it for
// whatever does not live there.
//
// With replicated metadata (replicas > 1, from the headers found or, on a fresh fabric, the
// options), a node that does not answer is skipped even on a fresh fabric (the majority
// formatted serves; the node is restored when it answers), and a node found unformatted on a
// formatted fabric is restored from its peers (alloc.Reformat) rather than formatted fresh,
// since fresh symmetric bump and epoch words would be behind the others' (fresh formatting is
// the fallback when no majority of its peers is formatted yet: a fabric being created).
func (s *Store) format(ctx context.Context, m farmem.Memory, formatted bool, home farmem.NodeID, replicas int) error {
	for _, n := range m.Topology().MemoryNodes() {
		if farmem.StatusOf(m, n).State == farmem.NodeLost {
			continue // formatted again by Store.Adopt
		}
		for attempt := 0; ; attempt++ {
			_, err := alloc.Open(ctx, m, n)
			if err == nil || (formatted || replicas > 1) && errors.Is(err, farmem.ErrNodeDown) && !errors.Is(err, farmem.ErrNodeLost) {
				break
			}
			switch {
			case errors.Is(err, alloc.ErrNotFormatted) || errors.Is(err, alloc.ErrHalfFormatted):
				if s.opts.NoCreate {
					return fmt.Errorf("%w: %w", ErrNoStore, err)
				}
				if formatted && replicas > 1 {
					if err = alloc.Reformat(ctx, m, home, n); err == nil {
						continue
					}
				}
				if err = alloc.Format(ctx, m, n, s.opts.Format); err == nil {
					continue // check it
				}
			case !errors.Is(err, alloc.ErrBadHeader):
				return fmt.Errorf("kvstore: %w", err)
			}
			if !errors.Is(err, alloc.ErrBadHeader) || attempt >= formatRetries {
				return fmt.Errorf("kvstore: %w", err)
			}
			if err := m.Runtime().Sleep(ctx, time.Duration(attempt+1)*50*time.Microsecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// formatRetries is how many times format retries a node another client seems to be formatting.
const formatRetries = 8

// create builds the index instances and the descriptor, and returns the descriptor and its
// address (not yet published).
func (s *Store) create(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (Descriptor, farmem.Addr, error) {
	d, err := s.newDescriptor(ctx, m, a)
	if err != nil {
		return Descriptor{}, 0, err
	}
	at, err := a.AllocOn(ctx, a.Home(), DescriptorSize, 64) // beside the root word: no second node the store needs
	if err != nil {
		return Descriptor{}, 0, fmt.Errorf("kvstore: allocate descriptor: %w", err)
	}
	b, err := d.Encode(at)
	if err != nil {
		return Descriptor{}, 0, err
	}
	if err := m.Write(ctx, at, b); err != nil {
		return Descriptor{}, 0, fmt.Errorf("kvstore: write descriptor: %w", err)
	}
	return d, at, nil
}

// newDescriptor creates the index instances and returns the descriptor naming them.
func (s *Store) newDescriptor(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (Descriptor, error) {
	syncName := s.opts.syncToCreate()
	d := Descriptor{
		Version: Version, Index: s.opts.Index.Name(), Replication: s.opts.Replication.Name(),
		Sync: syncName, Created: m.Runtime().Now(), Creator: m.Info().ID,
	}
	if r := len(a.MetaNodes()); r > 1 {
		d.Replicas = r
	}
	for i := range s.opts.Replication.Replicas() {
		root, err := s.opts.Index.Create(ctx, IndexEnv{Memory: m, Alloc: a})
		if err != nil {
			return Descriptor{}, fmt.Errorf("kvstore: create index instance %d: %w", i, err)
		}
		d.Roots = append(d.Roots, root)
	}
	return d, nil
}

// symDescriptorSize is the size of the symmetric block holding a replicated descriptor:
// DescriptorSize rounded up to 256 bytes (see createRep).
const symDescriptorSize = (DescriptorSize + 255) &^ 255

// createRep is create for replicated metadata: the descriptor goes to a symmetric block, one
// copy per metadata node; it returns the block's offset.
func (s *Store) createRep(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (Descriptor, uint64, error) {
	d, err := s.newDescriptor(ctx, m, a)
	if err != nil {
		return Descriptor{}, 0, err
	}
	// A block of symDescriptorSize, not DescriptorSize: the allocator carves every size class
	// from its current symmetric chunk in turn, and a replicated index's blocks (multiples
	// of 256 bytes) must keep finding it at a 256-byte boundary.
	off, err := a.AllocSymmetric(ctx, symDescriptorSize, 64)
	if err != nil {
		return Descriptor{}, 0, fmt.Errorf("kvstore: allocate descriptor: %w", err)
	}
	if err := createDescriptorRep(ctx, m, s.meta, d, uint64(off)); err != nil {
		return Descriptor{}, 0, err
	}
	return d, uint64(off), nil
}

// checkDescriptor checks that the store found is one the options can open, and settles the
// synchronizer.
func (s *Store) checkDescriptor() error {
	d := s.desc
	if d.replicas() != len(s.meta) {
		return fmt.Errorf("kvstore: the store records %d metadata replicas, its nodes' headers %d: %w", d.replicas(), len(s.meta), ErrBadRoot)
	}
	if d.Index != s.opts.Index.Name() || d.Replication != s.opts.Replication.Name() || len(d.Roots) != s.opts.Replication.Replicas() {
		return fmt.Errorf("kvstore: the store has index %q, replication %q over %d instances; the options say %q, %q over %d: %w",
			d.Index, d.Replication, len(d.Roots), s.opts.Index.Name(), s.opts.Replication.Name(), s.opts.Replication.Replicas(), ErrMismatch)
	}
	switch {
	case s.opts.Sync == nil:
		sy, err := SyncByName(d.Sync)
		if err != nil {
			return fmt.Errorf("kvstore: the store's synchronizer %q: pass it as Options.Sync: %w", d.Sync, err)
		}
		s.opts.Sync = sy
	case s.opts.Sync.Name() != d.Sync:
		return fmt.Errorf("kvstore: the store's synchronizer is %q, the options say %q: %w", d.Sync, s.opts.Sync.Name(), ErrMismatch)
	}
	if err := checkMatrix(s.opts, d.Sync); err != nil {
		// A store created before the matrix refused its combination (a hybrid tree recorded
		// with CIDER): it opens no more; make it again.
		return fmt.Errorf("kvstore: the store records synchronizer %q: %w", d.Sync, err)
	}
	return nil
}

// attach opens the index handles of client m (with allocator a, or a new one) and combines them.
func (s *Store) attach(ctx context.Context, m farmem.Memory, a *alloc.Allocator, owned bool) (*conn, error) {
	var base farmem.Stats // a client the store opened counts from its start, setup included
	if !owned {
		base = m.Stats()
	}
	ownA := a == nil
	if ownA {
		var err error
		if a, err = alloc.New(ctx, m, s.opts.Alloc); err != nil {
			return nil, fmt.Errorf("kvstore: allocator: %w", err)
		}
	}
	fail := func(hs []Index, err error) (*conn, error) {
		for _, h := range hs {
			_ = h.Close()
		}
		if ownA {
			_ = a.Close()
		}
		return nil, err
	}
	var hs []Index
	for i, root := range s.desc.Roots {
		sy, err := s.opts.Sync.New(ctx, m, i)
		if err != nil {
			return fail(hs, fmt.Errorf("kvstore: synchronizer %s: %w", s.opts.Sync.Name(), err))
		}
		h, err := s.opts.Index.Open(ctx, IndexEnv{Memory: m, Alloc: a, Sync: sy, Node: s.nodeState(m.Info().Node), Health: s.healthOf(m.Info().Node), Fabric: s.fabric}, root)
		if err != nil {
			return fail(hs, fmt.Errorf("kvstore: open index instance %d: %w", i, err))
		}
		hs = append(hs, h)
	}
	idx, err := s.opts.Replication.Combine(hs)
	if err != nil {
		return fail(hs, fmt.Errorf("kvstore: replication %s: %w", s.opts.Replication.Name(), err))
	}
	c := &conn{m: m, a: a, idx: idx, owned: owned, base: base, id: m.Info().ID}
	c.ag, _ = idx.(AppendGetter)
	return c, nil
}

// openMemory opens a client on the first node, from Nodes[start] on, that has a free slot, and
// returns it with that node's index.
func (s *Store) openMemory(ctx context.Context, start int) (farmem.Memory, int, error) {
	nodes := s.opts.Nodes
	var errs []error
	for i := range nodes {
		j := (start + i) % len(nodes)
		m, err := s.fabric.Open(ctx, nodes[j])
		if err == nil {
			return m, j, nil
		}
		if !errors.Is(err, farmem.ErrNoSpace) {
			return nil, 0, fmt.Errorf("kvstore: open a client on %v: %w", nodes[j], err)
		}
		errs = append(errs, err)
	}
	return nil, 0, fmt.Errorf("kvstore: no free client slot: %w", errors.Join(errs...))
}

// dial opens a new pooled client.
func (s *Store) dial(ctx context.Context, start int) (*conn, error) {
	m, _, err := s.openMemory(ctx, start)
	if err != nil {
		return nil, err
	}
	c, err := s.attach(ctx, m, nil, true)
	if err != nil {
		_ = m.Close()
		return nil, err
	}
	return c, nil
}

// acquire takes a free client from the pool, opening one if none is free and the pool may grow,
// else waiting to be handed one (see waitForClient).
func (s *Store) acquire(ctx context.Context) (*conn, error) {
	for {
		s.mu.Lock()
		if s.finished {
			s.mu.Unlock()
			return nil, errClosed
		}
		if n := len(s.idle); n > 0 {
			c := s.idle[n-1]
			s.idle = s.idle[:n-1]
			s.mu.Unlock()
			return c, nil
		}
		limit := s.capacity
		if s.opts.MaxClients > 0 && (limit == 0 || s.opts.MaxClients < limit) {
			limit = s.opts.MaxClients
		}
		if limit == 0 || len(s.live)+s.opening < limit {
			s.opening++
			start := s.next
			s.next++
			s.mu.Unlock()
			c, err := s.dial(ctx, start)
			s.mu.Lock()
			s.opening--
			switch {
			case err == nil && s.finished:
				s.drop(c)
				s.mu.Unlock()
				s.closeConn(c, true)
				return nil, errClosed
			case err == nil:
				s.live[c] = struct{}{}
				s.mu.Unlock()
				return c, nil
			case !errors.Is(err, farmem.ErrNoSpace) || len(s.live)+s.opening == 0:
				ws := s.takeWaiters(1) // a failed dial leaves room: let a waiter try
				s.mu.Unlock()
				wake(ws)
				return nil, err
			}
			// The fabric has no room for another client: from now on, wait for ours.
			s.capacity = len(s.live) + s.opening
		}
		c, err := s.waitForClient(ctx) // unlocks s.mu
		if err != nil || c != nil {
			return c, err
		}
	}
}

// release gives a client back after an operation that returned opErr: to the longest-waiting
// acquire if there is one, else to the pool. A client whose Memory is closed (it crashed), or
// any client once the store is closed, is closed instead.
func (s *Store) release(c *conn, opErr error) {
	s.mu.Lock()
	if !s.finished && !errors.Is(opErr, farmem.ErrClosed) {
		if w := s.takeWaiters(1); len(w) > 0 {
			w[0].c = c
			s.mu.Unlock()
			wake(w)
			return
		}
		s.idle = append(s.idle, c)
		s.mu.Unlock()
		return
	}
	s.drop(c)
	ws := s.takeWaiters(1) // room for a new client
	s.mu.Unlock()
	wake(ws)
	s.closeConn(c, true)
}

// check validates a key and, with a value, their sizes.
func (s *Store) check(key, value []byte) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > s.limits.MaxKey:
		return fmt.Errorf("kvstore: key of %d bytes, at most %d: %w", len(key), s.limits.MaxKey, ErrTooLarge)
	case len(key)+len(value) > s.limits.MaxKV:
		return fmt.Errorf("kvstore: key and value of %d bytes, at most %d: %w", len(key)+len(value), s.limits.MaxKV, ErrTooLarge)
	}
	return nil
}

// with runs op on a pooled client.
func (s *Store) with(ctx context.Context, op func(idx Index) error) error {
	c, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	err = s.run(ctx, c, op)
	s.release(c, err)
	return err
}

// run runs op on c's index. If it fails for want of far memory (which leaves the index as it
// was), run gathers memory (see gather) and runs op once more. The retry costs nothing unless
// memory ran out.
func (s *Store) run(ctx context.Context, c *conn, op func(idx Index) error) error {
	err := op(c.idx)
	if err == nil || !errors.Is(err, farmem.ErrNoSpace) {
		return err
	}
	s.gather(ctx, c)
	return op(c.idx)
}

// gather collects into c's allocator the memory the store's clients freed: it takes the idle
// clients from the pool, withdraws their epoch announcements and moves what their allocators
// hold into c's (alloc.Allocator.Absorb: no verb), gives them back, then withdraws c's own
// announcement and reclaims (blocks retired by deletes and updates wait out the epochs that
// announcements hold back, and no allocation can do this while the operation runs pinned), so
// that blocks freed by different clients can be rebuilt into whole chunks for any size class.
// Cost: one round trip per idle client and two or three for c; only when memory ran out.
func (s *Store) gather(ctx context.Context, c *conn) {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, d := range idle {
		if d.a.Quiesce(ctx) == nil {
			_ = c.a.Absorb(d.a)
		}
		s.release(d, nil)
	}
	if c.a.Quiesce(ctx) == nil {
		_, _ = c.a.Reclaim(ctx)
	}
}

// Get returns the value stored under key, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := s.check(key, nil); err != nil {
		return nil, err
	}
	var v []byte
	err := s.with(ctx, func(idx Index) (err error) {
		v, err = idx.Get(ctx, key)
		return err
	})
	return v, err
}

// AppendGet is Get that appends the value to dst and returns the extended slice (dst itself,
// with an error). A caller that reuses dst with room for its values reads with no allocation
// (on the default index; costs otherwise Get's).
func (s *Store) AppendGet(ctx context.Context, dst, key []byte) ([]byte, error) {
	if err := s.check(key, nil); err != nil {
		return dst, err
	}
	v := dst
	err := s.with(ctx, func(idx Index) (err error) {
		v, err = appendGet(ctx, idx, dst, key)
		return err
	})
	return v, err
}

// appendGet appends key's value to dst through idx: AppendGet if the index has it.
func appendGet(ctx context.Context, idx Index, dst, key []byte) ([]byte, error) {
	if ag, ok := idx.(AppendGetter); ok {
		return ag.AppendGet(ctx, dst, key)
	}
	return appendViaGet(ctx, idx, dst, key)
}

// appendGetConn is appendGet on client c's index, with the AppendGetter asserted at attach
// (Session.AppendGet makes the same choice inline).
func appendGetConn(ctx context.Context, c *conn, dst, key []byte) ([]byte, error) {
	if ag := c.ag; ag != nil {
		return ag.AppendGet(ctx, dst, key)
	}
	return appendViaGet(ctx, c.idx, dst, key)
}

// appendViaGet is appendGet for an index without AppendGet.
func appendViaGet(ctx context.Context, idx Index, dst, key []byte) ([]byte, error) {
	v, err := idx.Get(ctx, key)
	if err != nil {
		return dst, err
	}
	return append(dst, v...), nil
}

// Insert stores value under key if the store does not hold key, and otherwise returns an error
// wrapping ErrExists.
func (s *Store) Insert(ctx context.Context, key, value []byte) error {
	if err := s.check(key, value); err != nil {
		return err
	}
	return s.with(ctx, func(idx Index) error { return idx.Insert(ctx, key, value) })
}

// Update replaces the value stored under key, or returns an error wrapping ErrNotFound.
func (s *Store) Update(ctx context.Context, key, value []byte) error {
	if err := s.check(key, value); err != nil {
		return err
	}
	return s.with(ctx, func(idx Index) error { return idx.Update(ctx, key, value) })
}

// Put stores value under key whether or not the store holds key (an upsert). See the package
// doc for its linearization.
func (s *Store) Put(ctx context.Context, key, value []byte) error {
	if err := s.check(key, value); err != nil {
		return err
	}
	return s.with(ctx, func(idx Index) error { return put(ctx, idx, key, value) })
}

// Delete removes key, or returns an error wrapping ErrNotFound.
func (s *Store) Delete(ctx context.Context, key []byte) error {
	if err := s.check(key, nil); err != nil {
		return err
	}
	return s.with(ctx, func(idx Index) error { return idx.Delete(ctx, key) })
}

// Scan returns the pairs whose keys are in [from, to), ascending, at most limit of them (limit
// <= 0: no limit); an empty from starts at the first key, a nil to has no end. A store whose
// index is not an OrderedIndex returns ErrNoOrderedIndex, with no verb.
func (s *Store) Scan(ctx context.Context, from, to []byte, limit int) ([]Pair, error) {
	if !s.Ordered() {
		return nil, ErrNoOrderedIndex
	}
	var ps []Pair
	err := s.with(ctx, func(idx Index) (err error) {
		ps, err = scan(ctx, idx, from, to, limit)
		return err
	})
	return ps, err
}

// put is the upsert: an Update, and an Insert if the key is absent, until one of them succeeds.
func put(ctx context.Context, idx Index, key, value []byte) error {
	for {
		err := idx.Update(ctx, key, value)
		if err == nil || !errors.Is(err, ErrNotFound) {
			return err
		}
		err = idx.Insert(ctx, key, value)
		if !errors.Is(err, ErrExists) {
			return err
		}
		// Inserted by another client between our update and insert: update again.
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func scan(ctx context.Context, idx Index, from, to []byte, limit int) ([]Pair, error) {
	o, ok := idx.(OrderedIndex)
	if !ok {
		return nil, ErrNoOrderedIndex
	}
	return o.Scan(ctx, from, to, limit)
}

// Ordered reports whether the store's index is ordered (Scan works).
func (s *Store) Ordered() bool { return s.ordered }

// Stats returns the store's counted costs: the sum of the farmem.Stats of every client it
// has used (pooled, in sessions, and already closed) since it took them. Take deltas around
// a run for costs per operation.
func (s *Store) Stats() farmem.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.retired
	for c := range s.live {
		st = st.Add(c.m.Stats().Sub(c.base))
	}
	return st
}

// Clients returns the number of clients the store holds open (pooled or in sessions).
func (s *Store) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// Descriptor returns the store's descriptor: its index kind, replication and roots.
func (s *Store) Descriptor() Descriptor { return s.desc }

// Root returns the address of the store's root word (RootOffset on the allocator's home node).
func (s *Store) Root() farmem.Addr { return farmem.MakeAddr(s.home, RootOffset) }

// Limits returns the key and value sizes the store accepts.
func (s *Store) Limits() Limits { return s.limits }

// Sync returns the name of the synchronizer the store's clients use.
func (s *Store) Sync() string { return s.opts.Sync.Name() }
