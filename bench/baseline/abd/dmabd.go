package abd

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
)

// Stats are a DM-ABD handle's counters.
type Stats struct {
	// Gets and Updates count operations that returned nil.
	Gets, Updates uint64
	// WriteBacks counts gets that wrote their value back to a majority (a third round trip);
	// CASRetries the CAS rounds repeated because a word had moved (contention); Restarts the
	// gets that started over on a record reused under them.
	WriteBacks, CASRetries, Restarts uint64
}

// DMABD is one client's handle on a DM-ABD object (see the package doc).
type DMABD struct {
	m      farmem.Memory
	addrs  []farmem.Addr
	p      Params
	maj    int
	id     farmem.ClientID // the writer's lane plus one (0: no lane)
	seq    uint16
	known  []Stamp // per replica: the largest stamp a completed op saw or installed there
	stats  Stats
	closed bool
}

// CreateDMABD allocates a DM-ABD object with p on each of nodes (2f+1 distinct memory nodes)
// with a, formats it and returns the replicas' addresses.
func CreateDMABD(ctx context.Context, m farmem.Memory, a *alloc.Allocator, nodes []farmem.NodeID, p Params) ([]farmem.Addr, error) {
	size := Size(p)
	if size == 0 || len(nodes)%2 == 0 {
		return nil, fmt.Errorf("%w: %+v on %d nodes", ErrBadParams, p, len(nodes))
	}
	addrs := make([]farmem.Addr, len(nodes))
	for i, n := range nodes {
		var err error
		if addrs[i], err = a.AllocOn(ctx, n, size, 64); err != nil {
			return nil, fmt.Errorf("abd: allocating %d bytes on %v: %w", size, n, err)
		}
	}
	b := new(farmem.Batch)
	zero := make([]byte, size-64)
	for _, ad := range addrs {
		b.MaskedCAS(ad, 0, 0, 0, ^uint64(0)) // the word is only ever written by atomics
		b.Write(ad+64, zero)
	}
	if err := m.Do(ctx, b); err != nil {
		return nil, fmt.Errorf("abd: format: %w", err)
	}
	return addrs, nil
}

// OpenDMABD returns m's handle on the DM-ABD object with p at addrs (no verb).
func OpenDMABD(m farmem.Memory, addrs []farmem.Addr, p Params) (*DMABD, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	seen := map[farmem.NodeID]bool{}
	for _, a := range addrs {
		if seen[a.Node()] {
			return nil, fmt.Errorf("%w: two replicas on %v", ErrBadParams, a.Node())
		}
		seen[a.Node()] = true
	}
	if len(addrs)%2 == 0 {
		return nil, fmt.Errorf("%w: %d replicas (want an odd number)", ErrBadParams, len(addrs))
	}
	d := &DMABD{m: m, addrs: addrs, p: p, maj: len(addrs)/2 + 1, known: make([]Stamp, len(addrs))}
	if r := laneOf(m.Topology(), m.Info().ID); r < uint64(p.Writers) {
		d.id = farmem.ClientID(r + 1)
	}
	return d, nil
}

// laneOf is a client's writer lane: its rank with compute nodes interleaved (slot s of node n
// of N is s*N + n), so the first Writers/N clients of every compute node have lanes.
func laneOf(t *farmem.Topology, id farmem.ClientID) uint64 {
	rank := uint64(id)
	if per, n := uint64(t.ClientsPerNode), uint64(len(t.ComputeNodes())); id > 0 && per > 0 && n > 0 {
		i := uint64(id) - 1
		rank = (i%per)*n + i/per
	}
	return rank
}

// Stats returns the handle's counters.
func (d *DMABD) Stats() Stats { return d.stats }

// Close releases the handle. Idempotent.
func (d *DMABD) Close() error { d.closed = true; return nil }

func (d *DMABD) slotAddr(r int, s Stamp) farmem.Addr {
	lane := uint64(s.Writer()-1)*uint64(d.p.Slots) + uint64(s.Seq())%uint64(d.p.Slots)
	return d.addrs[r] + farmem.Addr(64+lane*d.p.recSize())
}

// held counts the replicas known to hold v or more.
func (d *DMABD) held(v Stamp) int {
	n := 0
	for _, k := range d.known {
		if k >= v {
			n++
		}
	}
	return n
}

// Get returns the value (nil if never written): two round trips, three with a write-back.
func (d *DMABD) Get(ctx context.Context) ([]byte, error) {
	if d.closed {
		return nil, ErrClosed
	}
	for {
		b := new(farmem.Batch)
		bufs := make([][]byte, len(d.addrs))
		for r, a := range d.addrs {
			bufs[r] = make([]byte, 8)
			b.Read(a, bufs[r])
		}
		p := d.m.Post(ctx, b)
		if err := p.WaitNodes(ctx, d.maj); err != nil {
			return nil, fmt.Errorf("abd: get: %w", err)
		}
		var v Stamp
		var cands []int
		for r, a := range d.addrs {
			if !p.NodeDone(a.Node()) {
				continue
			}
			w := Stamp(binary.LittleEndian.Uint64(bufs[r]))
			d.known[r] = max(d.known[r], w)
			switch {
			case w > v:
				v, cands = w, append(cands[:0], r)
			case w == v:
				cands = append(cands, r)
			}
		}
		if v == 0 {
			d.stats.Gets++
			return nil, nil
		}
		val, rec, err := d.chase(ctx, v, cands)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			d.stats.Restarts++
			continue
		}
		if d.held(v) < d.maj {
			d.stats.WriteBacks++
			if err := d.install(ctx, v, rec); err != nil {
				return nil, fmt.Errorf("abd: get: write-back: %w", err)
			}
		}
		d.stats.Gets++
		return val, nil
	}
}

// chase reads v's record from the first of cands (replicas that answered with v), and, if
// that one is not v's whole record, from all of them at once. It returns the value and the
// record, or a nil record if none was whole (the get restarts).
func (d *DMABD) chase(ctx context.Context, v Stamp, cands []int) ([]byte, []byte, error) {
	rec := make([]byte, d.p.recSize())
	if err := d.m.Read(ctx, d.slotAddr(cands[0], v), rec); err == nil {
		if val, ok := open(rec, v.identity()); ok {
			return val, rec, nil
		}
	} else if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("abd: get: %w", err)
	}
	if len(cands) == 1 {
		return nil, nil, nil
	}
	b := new(farmem.Batch)
	recs := make([][]byte, len(cands))
	for i, r := range cands {
		recs[i] = make([]byte, d.p.recSize())
		b.Read(d.slotAddr(r, v), recs[i])
	}
	p := d.m.Post(ctx, b)
	if err := p.Wait(ctx, 0); err != nil {
		return nil, nil, fmt.Errorf("abd: get: %w", err)
	}
	for i := range cands {
		if _, err := b.Result(i); err != nil {
			continue
		}
		if val, ok := open(recs[i], v.identity()); ok {
			return val, recs[i], nil
		}
	}
	return nil, nil, nil
}

// Update sets the value: two round trips in the common case.
func (d *DMABD) Update(ctx context.Context, value []byte) error {
	if d.closed {
		return ErrClosed
	}
	if d.id == 0 {
		return fmt.Errorf("%w: client %d, %d lanes", ErrNotWriter, d.m.Info().ID, d.p.Writers)
	}
	if len(value) > d.p.ValueSize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(value), d.p.ValueSize)
	}
	d.seq++
	s0 := MakeStamp(0, d.id, d.seq)
	rec := make([]byte, d.p.recSize())
	seal(rec, s0.identity(), value)
	b := new(farmem.Batch)
	bufs := make([][]byte, len(d.addrs))
	for r, a := range d.addrs {
		bufs[r] = make([]byte, 8)
		b.Write(d.slotAddr(r, s0), rec)
		b.Read(a, bufs[r])
	}
	p := d.m.Post(ctx, b)
	if err := p.WaitNodes(ctx, d.maj); err != nil {
		return fmt.Errorf("abd: update: %w", err)
	}
	var top Stamp
	for r, a := range d.addrs {
		if p.NodeDone(a.Node()) {
			w := Stamp(binary.LittleEndian.Uint64(bufs[r]))
			d.known[r] = max(d.known[r], w)
			top = max(top, w)
		}
	}
	ts := top.TS() + 1
	if ts >= 1<<32 {
		return ErrExhausted
	}
	if err := d.install(ctx, MakeStamp(ts, d.id, d.seq), nil); err != nil {
		return fmt.Errorf("abd: update: %w", err)
	}
	d.stats.Updates++
	return nil
}

// install raises the max word of every replica not known to hold v to v (the CAS-emulated
// MAX), with v's record written ahead of the CAS when rec is not nil (a write-back), until a
// majority holds v or more: one round trip, plus one per round whose CAS found the word moved.
func (d *DMABD) install(ctx context.Context, v Stamp, rec []byte) error {
	for round := 0; ; round++ {
		have := d.held(v)
		if have >= d.maj {
			return nil
		}
		if round > 0 {
			d.stats.CASRetries++
		}
		b := new(farmem.Batch)
		idx := make([]int, len(d.addrs))
		exp := make([]Stamp, len(d.addrs))
		nodes := 0
		for r, a := range d.addrs {
			idx[r] = -1
			if d.known[r] >= v {
				continue
			}
			if rec != nil {
				b.Write(d.slotAddr(r, v), rec)
			}
			exp[r] = d.known[r]
			idx[r] = b.CAS(a, uint64(exp[r]), uint64(v))
			nodes++
		}
		p := d.m.Post(ctx, b)
		if err := p.WaitNodes(ctx, min(d.maj-have, nodes)); err != nil {
			return err
		}
		for r, a := range d.addrs {
			if idx[r] < 0 || !p.NodeDone(a.Node()) {
				continue
			}
			prev, _ := b.Result(idx[r])
			if Stamp(prev) == exp[r] {
				d.known[r] = max(d.known[r], v)
			} else {
				d.known[r] = max(d.known[r], Stamp(prev))
			}
		}
	}
}
