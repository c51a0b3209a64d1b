package transport

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// Verbs supplies a transport client's Read, Write, CAS, FAA, MaskedCAS and Do: embed it and set
// RunOne to the client's runner of one-op batches and PostBatch to its Post. A client with a
// faster Do defines its own, which takes precedence over the embedded one.
type Verbs struct {
	// RunOne executes op as a one-op batch and returns its result and error.
	RunOne func(ctx context.Context, op farmem.Op) (uint64, error)
	// PostBatch is the client's Post.
	PostBatch func(ctx context.Context, b *farmem.Batch) *farmem.Pending

	one *farmem.Batch // PostOne's batch; dropped when one is left in flight
}

// Read implements farmem.Memory.
func (v *Verbs) Read(ctx context.Context, src farmem.Addr, dst []byte) error {
	_, err := v.RunOne(ctx, farmem.Op{Kind: farmem.OpRead, Addr: src, Buf: dst})
	return err
}

// Write implements farmem.Memory.
func (v *Verbs) Write(ctx context.Context, dst farmem.Addr, src []byte) error {
	_, err := v.RunOne(ctx, farmem.Op{Kind: farmem.OpWrite, Addr: dst, Buf: src})
	return err
}

// CAS implements farmem.Memory.
func (v *Verbs) CAS(ctx context.Context, a farmem.Addr, old, new uint64) (uint64, error) {
	return v.RunOne(ctx, farmem.Op{Kind: farmem.OpCAS, Addr: a, Cmp: old, Swap: new})
}

// FAA implements farmem.Memory.
func (v *Verbs) FAA(ctx context.Context, a farmem.Addr, delta uint64) (uint64, error) {
	return v.RunOne(ctx, farmem.Op{Kind: farmem.OpFAA, Addr: a, Swap: delta})
}

// MaskedCAS implements farmem.Memory.
func (v *Verbs) MaskedCAS(ctx context.Context, a farmem.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	return v.RunOne(ctx, farmem.Op{Kind: farmem.OpMaskedCAS, Addr: a, Cmp: cmp, CmpMask: cmpMask, Swap: swap, SwapMask: swapMask})
}

// Do implements farmem.Memory: PostBatch, then [Finish].
func (v *Verbs) Do(ctx context.Context, b *farmem.Batch) error {
	return Finish(ctx, v.PostBatch(ctx, b))
}

// PostOne runs op as a one-op batch through PostBatch and waits for it: the slow path of a
// single verb, for when the client's fast path does not apply. It reuses one batch from call to
// call; when ctx ends with the op still in flight, the batch is left to the transport and a new
// one serves the next call. Like the client, it is for one goroutine.
func (v *Verbs) PostOne(ctx context.Context, op farmem.Op) (uint64, error) {
	if v.one == nil {
		v.one = &farmem.Batch{}
	}
	v.one.Ops = append(v.one.Ops[:0], op)
	p := v.PostBatch(ctx, v.one)
	if err := p.Wait(ctx, 0); err != nil {
		v.one = nil
		return 0, err
	}
	val, err := v.one.Result(0)
	v.one.Ops[0] = farmem.Op{}
	return val, err
}

// Group is the part of a batch that goes to one node: the indexes of its ops, in batch order.
type Group struct {
	Node farmem.NodeID
	Idx  []int
}

// GroupByNode splits b by target node, keeping batch order within each node and the nodes in
// order of their first op. It appends to gs and returns it.
func GroupByNode(b *farmem.Batch, gs []Group) []Group {
	base := len(gs)
	for i := range b.Ops {
		n := b.Ops[i].Addr.Node()
		g := -1
		for j := base; j < len(gs); j++ {
			if gs[j].Node == n {
				g = j
				break
			}
		}
		if g < 0 {
			gs = append(gs, Group{Node: n})
			g = len(gs) - 1
		}
		gs[g].Idx = append(gs[g].Idx, i)
	}
	return gs
}
