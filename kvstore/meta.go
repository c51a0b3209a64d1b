package kvstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
)

// Replicated store metadata (Options.Replicas = r = 2f+1 > 1). The store's root word, its
// descriptor and its generation table live at the offsets of the unreplicated store
// (RootOffset, a descriptor block, GenOffset) on each of the allocator's r metadata nodes
// (alloc.MetaNodes: r nodes from the home node on), and every access reaches a majority q =
// f+1 of them:
//
//   - the root word is decided by majority CASes: a creator claims it by CASing, on every
//     node whose word is empty or an expired claim, from what it read to its claim, and holds
//     the claim once q CASes succeeded; it publishes by CASing q of its claims to the ready
//     word, then writes it back on the others. A ready word is never overwritten by a claim,
//     so the nodes that ever hold two creators' ready words are disjoint, and at most one
//     ready word is ever on a majority: readers take the ready word that q nodes hold (and
//     write it back on the others), and see no store only when q nodes are empty.
//   - the descriptor is one block of the symmetric area, the same offset on every node, each
//     copy written (checksummed with its own address) before that node's root word names it.
//   - a generation word is the largest one q nodes hold (generations only grow); Adopt raises
//     it with CASes on every node and has done so once q of them succeeded.
//
// A metadata node that restarts is restored by Store.Adopt before the store counts it: its
// allocator words by alloc.Reformat, then the descriptor, the generation words (the largest of
// a majority of its peers) and last the root word (while it is 0, readers do not count it).

// homeHeader reads the allocator header that names the store's home node: the lowest memory
// node's, or, when that node does not answer and the metadata is replicated, the next one's
// that answers. One Read when the lowest node answers.
func homeHeader(ctx context.Context, m farmem.Memory) (alloc.Header, error) {
	nodes := m.Topology().MemoryNodes()
	if len(nodes) == 0 {
		return alloc.Header{}, fmt.Errorf("kvstore: the fabric has no memory node: %w", farmem.ErrInvalid)
	}
	var first error
	for _, n := range nodes {
		h, err := alloc.Open(ctx, m, n)
		if err == nil {
			if first != nil && h.Replicas == 1 {
				return alloc.Header{}, first // the unreplicated home node does not answer
			}
			if h.Home.IsCompute() || h.Home == 0 {
				return alloc.Header{}, fmt.Errorf("kvstore: home node %v: %w", h.Home, ErrBadRoot)
			}
			return h, nil
		}
		if errors.Is(err, alloc.ErrNotFormatted) || errors.Is(err, alloc.ErrHalfFormatted) {
			if first == nil {
				return alloc.Header{}, fmt.Errorf("%w: %w", ErrNoStore, err)
			}
			continue // adopted after a restart, not restored yet
		}
		if !errors.Is(err, farmem.ErrNodeDown) {
			return alloc.Header{}, err
		}
		if first == nil {
			first = err
		}
	}
	return alloc.Header{}, first
}

// quorumWait waits until q of nodes are complete in p and good(i) holds for each (i the
// node's index in nodes); it returns their indexes, waiting for more nodes when some complete
// ones are not good, and failing (ErrNodeDown) once q good ones cannot come.
func quorumWait(ctx context.Context, p *farmem.Pending, nodes []farmem.NodeID, q int, good func(i int) bool) ([]int, error) {
	k := q
	for {
		if err := p.WaitNodes(ctx, k); err != nil {
			return nil, err
		}
		done := p.NodesDone(nil)
		var ok []int
		for _, n := range done {
			if i := slices.Index(nodes, n); i >= 0 && good(i) {
				ok = append(ok, i)
			}
		}
		if len(ok) >= q {
			return ok, nil
		}
		k = len(done) + q - len(ok)
		if k > len(nodes) {
			return nil, fmt.Errorf("kvstore: %d of %d metadata nodes answered, %d usable, want %d: %w", len(done), len(nodes), len(ok), q, farmem.ErrNodeDown)
		}
	}
}

// readWords reads the word at offset off of every node, with the node's allocator epoch word
// in the same batch, and waits for q nodes whose epoch word is not 0 (a metadata node not
// restored yet after a restart is skipped); it returns the words (valid at the indexes
// returned) and the indexes.
func readWords(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, q int, off uint64) ([]uint64, []int, error) {
	b := &farmem.Batch{}
	bufs := make([][]byte, len(nodes))
	eps := make([][]byte, len(nodes))
	for i, n := range nodes {
		bufs[i], eps[i] = make([]byte, 8), make([]byte, 8)
		b.Read(farmem.MakeAddr(n, alloc.EpochWordOffset), eps[i])
		b.Read(farmem.MakeAddr(n, off), bufs[i])
	}
	got, err := quorumWait(ctx, m.Post(ctx, b), nodes, q, func(i int) bool { return binary.LittleEndian.Uint64(eps[i]) != 0 })
	if err != nil {
		return nil, nil, err
	}
	w := make([]uint64, len(nodes))
	for _, i := range got {
		w[i] = binary.LittleEndian.Uint64(bufs[i])
	}
	return w, got, nil
}

// casWords CASes the word at off of node i from old[i] to new on every node (skipping nodes
// where skip(i)) and returns the indexes of the nodes where it succeeded and what each node
// answered (prev[i]; old[i] where unknown). It waits until q of the CASes succeeded, or until
// so many failed or answered otherwise that q cannot (then it returns fewer); it never fails
// on a node's failure alone.
func casWords(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, off uint64, old []uint64, new uint64, skip func(i int) bool) ([]int, []uint64, error) {
	b := &farmem.Batch{}
	ops := make([]int, len(nodes))
	tried := 0
	for i, n := range nodes {
		ops[i] = -1
		if skip != nil && skip(i) {
			continue
		}
		ops[i] = b.CAS(farmem.MakeAddr(n, off), old[i], new)
		tried++
	}
	prev := slices.Clone(old)
	if tried == 0 {
		return nil, prev, nil
	}
	p := m.Post(ctx, b)
	q := min(tried, len(nodes)/2+1)
	_, err := quorumWait(ctx, p, nodes, q, func(i int) bool {
		if ops[i] < 0 {
			return false
		}
		got, _ := b.Result(ops[i])
		return got == old[i]
	})
	if err != nil && !errors.Is(err, farmem.ErrNodeDown) {
		return nil, prev, err
	}
	var won []int
	for _, n := range p.NodesDone(nil) {
		i := slices.Index(nodes, n)
		if i < 0 || ops[i] < 0 {
			continue
		}
		prev[i], _ = b.Result(ops[i])
		if prev[i] == old[i] {
			won = append(won, i)
			prev[i] = new
		}
	}
	return won, prev, nil
}

// decided returns the word that at least q of the indexes in got hold in w, and whether there
// is one.
func decided(w []uint64, got []int, q int) (uint64, bool) {
	for _, i := range got {
		n := 0
		for _, j := range got {
			if w[j] == w[i] {
				n++
			}
		}
		if n >= q {
			return w[i], true
		}
	}
	return 0, false
}

// findOrCreateRep is findOrCreate over the metadata nodes (see above).
//
// It also returns the nodes that answered with an empty root word once the store was found:
// nodes whose allocator metadata is restored (or formatted late) but whose store words are
// not, which the caller restores (Store.restoreMeta).
func findOrCreateRep(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, lease, skew time.Duration, create func(ctx context.Context) (Descriptor, uint64, error)) (Descriptor, RootWord, []farmem.NodeID, error) {
	rt := m.Runtime()
	q := len(nodes)/2 + 1
	backoff := 2 * time.Microsecond
	for {
		w, got, err := readWords(ctx, m, nodes, q, RootOffset)
		if err != nil {
			return Descriptor{}, 0, nil, fmt.Errorf("kvstore: read root words: %w", err)
		}
		v, ok := decided(w, got, q)
		rw := RootWord(v)
		switch {
		case ok && rw.State() == RootReady:
			writeBack(m, nodes, RootOffset, w, got, v)
			d, err := readDescriptorRep(ctx, m, nodes, w, v)
			var bare []farmem.NodeID
			for _, i := range got {
				if w[i] == 0 {
					bare = append(bare, nodes[i])
				}
			}
			return d, rw, bare, err
		case ok && rw.State() == RootInvalid:
			return Descriptor{}, 0, nil, fmt.Errorf("kvstore: root words hold %#x: %w", v, ErrBadRoot)
		}
		// Claimable: empty, or a claim whose lease ran out. Ready words are never claimed.
		now := rt.Now()
		claimable := func(i int) bool {
			x := RootWord(w[i])
			return x.State() == RootEmpty || x.State() == RootClaimed && after(now, x.Deadline().Add(skew))
		}
		free := 0
		for _, i := range got {
			if claimable(i) {
				free++
			}
		}
		if free >= q && ok && rw.State() == RootEmpty && create == nil {
			return Descriptor{}, 0, nil, fmt.Errorf("%w (root words empty on a majority)", ErrNoStore)
		}
		if free >= q && create != nil {
			claim := claimWord(m.Info().ID, now.Add(lease))
			won, _, err := casWords(ctx, m, nodes, RootOffset, w, uint64(claim), func(i int) bool { return !slices.Contains(got, i) || !claimable(i) })
			if err != nil {
				return Descriptor{}, 0, nil, fmt.Errorf("kvstore: claim root words: %w", err)
			}
			if len(won) >= q {
				d, off, err := create(ctx)
				if err != nil {
					// Give the claim back so that others need not wait for the lease.
					_, _, _ = casWords(ctx, m, nodes, RootOffset, fill(len(nodes), uint64(claim)), 0, nil)
					return Descriptor{}, 0, nil, err
				}
				ready, err := readyWord(farmem.MakeAddr(nodes[0], off))
				if err != nil {
					return Descriptor{}, 0, nil, err
				}
				won, prev, err := casWords(ctx, m, nodes, RootOffset, fill(len(nodes), uint64(claim)), uint64(ready), nil)
				if err != nil {
					return Descriptor{}, 0, nil, fmt.Errorf("kvstore: publish root words: %w", err)
				}
				if len(won) >= q {
					// Write back on the others: from what they answered, or, for nodes that
					// did not answer yet, from the claim or from empty (a node this claim
					// skipped).
					b := &farmem.Batch{}
					for i, n := range nodes {
						if slices.Contains(won, i) {
							continue
						}
						for _, from := range []uint64{prev[i], uint64(claim), 0} {
							b.Unsignaled(b.CAS(farmem.MakeAddr(n, RootOffset), from, uint64(ready)))
						}
					}
					if len(b.Ops) > 0 {
						m.Post(context.Background(), b)
					}
					return d, ready, nil, nil
				}
				// Our lease ran out and another client took the claim over on a majority:
				// what we built is leaked, and the store is theirs.
			}
			continue
		}
		if err := rt.Sleep(ctx, backoff); err != nil {
			return Descriptor{}, 0, nil, err
		}
		backoff = min(2*backoff, time.Millisecond)
	}
}

func fill(n int, v uint64) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// writeBack CASes, unsignaled, the word at off of each node of got that does not hold v from
// what it held to v.
func writeBack(m farmem.Memory, nodes []farmem.NodeID, off uint64, w []uint64, got []int, v uint64) {
	b := &farmem.Batch{}
	for _, i := range got {
		if w[i] != v {
			b.Unsignaled(b.CAS(farmem.MakeAddr(nodes[i], off), w[i], v))
		}
	}
	if len(b.Ops) > 0 {
		m.Post(context.Background(), b)
	}
}

// readDescriptorRep reads the descriptor named by ready word v from the nodes whose root word
// holds v, one after another until a copy validates.
func readDescriptorRep(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, w []uint64, v uint64) (Descriptor, error) {
	off := RootWord(v).Descriptor().Offset()
	var errs []error
	for i, n := range nodes {
		if w[i] != v {
			continue
		}
		d, err := readDescriptor(ctx, m, farmem.MakeAddr(n, off))
		if err == nil {
			return d, nil
		}
		errs = append(errs, err)
	}
	return Descriptor{}, errors.Join(errs...)
}

// createDescriptorRep writes descriptor d to the symmetric block at off on every metadata node
// and waits for a majority.
func createDescriptorRep(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, d Descriptor, off uint64) error {
	b := &farmem.Batch{}
	for _, n := range nodes {
		enc, err := d.Encode(farmem.MakeAddr(n, off))
		if err != nil {
			return err
		}
		b.Write(farmem.MakeAddr(n, off), enc)
	}
	if err := m.Post(ctx, b).WaitNodes(ctx, len(nodes)/2+1); err != nil {
		return fmt.Errorf("kvstore: write descriptor: %w", err)
	}
	return nil
}

// generationsRep reads the generation words of every memory node from a majority of the
// restored metadata nodes, taking the largest of each (one round trip).
func generationsRep(ctx context.Context, m farmem.Memory, meta []farmem.NodeID) (map[farmem.NodeID]GenWord, error) {
	tables, got, err := genTables(ctx, m, meta, len(meta)/2+1)
	if err != nil {
		return nil, err
	}
	out := map[farmem.NodeID]GenWord{}
	for _, node := range m.Topology().MemoryNodes() {
		if int(node) > MaxGenNodes {
			continue
		}
		var g GenWord
		for _, i := range got {
			g = max(g, GenWord(binary.LittleEndian.Uint64(tables[i][8*(node-1):])))
		}
		out[node] = g
	}
	return out, nil
}

// genTables reads the generation tables of nodes, waiting for q restored ones.
func genTables(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, q int) ([][]byte, []int, error) {
	b := &farmem.Batch{}
	bufs := make([][]byte, len(nodes))
	eps := make([][]byte, len(nodes))
	for i, x := range nodes {
		bufs[i], eps[i] = make([]byte, 8*MaxGenNodes), make([]byte, 8)
		b.Read(farmem.MakeAddr(x, alloc.EpochWordOffset), eps[i])
		b.Read(farmem.MakeAddr(x, GenOffset), bufs[i])
	}
	got, err := quorumWait(ctx, m.Post(ctx, b), nodes, q, func(i int) bool { return binary.LittleEndian.Uint64(eps[i]) != 0 })
	if err != nil {
		return nil, nil, fmt.Errorf("kvstore: read generation tables: %w", err)
	}
	return bufs, got, nil
}

// setGenRep raises node's generation word from what each metadata node holds to next, on a
// majority; it returns the word a majority then holds (next, or a larger one another client
// wrote).
func setGenRep(ctx context.Context, m farmem.Memory, meta []farmem.NodeID, node farmem.NodeID, next GenWord) (GenWord, error) {
	off := uint64(GenOffset + 8*(node-1))
	q := len(meta)/2 + 1
	for range 16 {
		w, got, err := readWords(ctx, m, meta, q, off)
		if err != nil {
			return 0, err
		}
		var top GenWord
		for _, i := range got {
			top = max(top, GenWord(w[i]))
		}
		if top >= next {
			// Raised to next or past it already: make sure a majority holds it.
			next = top
		}
		won, _, err := casWords(ctx, m, meta, off, w, uint64(next), func(i int) bool { return !slices.Contains(got, i) || GenWord(w[i]) == next })
		if err != nil {
			return 0, err
		}
		have := len(won)
		for _, i := range got {
			if GenWord(w[i]) == next {
				have++
			}
		}
		if have >= q {
			return next, nil
		}
	}
	return 0, fmt.Errorf("kvstore: generation of %v keeps changing: %w", node, farmem.ErrInvalid)
}
