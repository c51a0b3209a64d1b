package sim

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// The single verbs of a client, straight to single: the same ops transport.Verbs would build
// and run through its runner, without the runner's indirect call and the copies of the op
// from frame to frame (a simulated verb's stack is cold when its goroutine resumes, so every
// frame it writes costs cache misses).

// Read implements farmem.Memory.
func (c *client) Read(ctx context.Context, src farmem.Addr, dst []byte) error {
	op := farmem.Op{Kind: farmem.OpRead, Addr: src, Buf: dst}
	_, err := c.single(ctx, &op)
	return err
}

// Write implements farmem.Memory.
func (c *client) Write(ctx context.Context, dst farmem.Addr, src []byte) error {
	op := farmem.Op{Kind: farmem.OpWrite, Addr: dst, Buf: src}
	_, err := c.single(ctx, &op)
	return err
}

// CAS implements farmem.Memory.
func (c *client) CAS(ctx context.Context, a farmem.Addr, old, new uint64) (uint64, error) {
	op := farmem.Op{Kind: farmem.OpCAS, Addr: a, Cmp: old, Swap: new}
	return c.single(ctx, &op)
}

// FAA implements farmem.Memory.
func (c *client) FAA(ctx context.Context, a farmem.Addr, delta uint64) (uint64, error) {
	op := farmem.Op{Kind: farmem.OpFAA, Addr: a, Swap: delta}
	return c.single(ctx, &op)
}

// MaskedCAS implements farmem.Memory.
func (c *client) MaskedCAS(ctx context.Context, a farmem.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	op := farmem.Op{Kind: farmem.OpMaskedCAS, Addr: a, Cmp: cmp, CmpMask: cmpMask, Swap: swap, SwapMask: swapMask}
	return c.single(ctx, &op)
}
