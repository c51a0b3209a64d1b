package selcc

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// releaseUnforwarded answers a PeerWr or PeerRd to an M holder without forwarding the line
// (Options.NoForwarding, the paper's ablation): the dirty range is written back and the hold
// released (PeerWr) or downgraded to S (PeerRd) in one ordered batch, and the requester is
// acknowledged, so it retries its atomic and READ. The caller holds f's latch X.
func (n *node) releaseUnforwarded(ctx context.Context, m farmem.Memory, v invalidation, f *frame) (uint64, error) {
	cd := n.c.opts.Codec
	var b farmem.Batch
	if f.hi > f.lo {
		buf := make([]byte, f.hi-f.lo)
		if err := m.Read(ctx, f.body.Add(uint64(f.lo)), buf); err != nil {
			return 0, err
		}
		b.Write(v.gcl.Body().Add(uint64(f.lo)), buf)
	}
	if v.kind == peerWr {
		b.FAA(v.gcl.Latch(), ReleaseExclusiveDelta(cd, n.id))
	} else {
		b.FAA(v.gcl.Latch(), cd.Shared(n.id)-cd.Exclusive(n.id))
	}
	if err := doAll(ctx, m, &b); err != nil {
		return 0, err
	}
	f.lo, f.hi = 0, 0
	if v.kind == peerWr {
		f.memo = memoI
		n.unmap(f)
	} else {
		f.memo = memoS
	}
	n.stats.handled.Add(1)
	return replyAck, nil
}
