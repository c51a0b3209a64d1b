package selcc

import (
	"context"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// settleUnmapped settles this node's orphans on g when a peer's invalidation finds no frame
// for g here. An orphan is otherwise settled only by this node's own next acquisition of the
// line; until then the word may name this node (a hand-over whose forward never came) while the
// handler, having no frame, drops every invalidation for it, and the peers that want the line
// retry forever (they would wait for a client of this node to want the line first). So the
// handler settles it as an acquisition would: it takes a free frame without waiting (or a
// quarantined one it can reclaim; none, or its latch busy: it leaves the orphan for later), maps it to g (if g was mapped meanwhile,
// that frame's acquisition settles it), and settles under the frame's exclusive latch with memo
// I, then frees the frame. It never waits: a landed hold whose forwarded line has not come yet
// is left for later. Costs: nothing unless the node has orphans on g; then one READ of the
// word, a local READ per recorded answer word, and an FAA per landed hold (in one batch with
// the write-back of a line forwarded dirty), on the handler.
func (n *node) settleUnmapped(ctx context.Context, m farmem.Memory, g GCL) error {
	return n.settleFree(ctx, m, g, false)
}

// settleFree is settleUnmapped; with wait, a landed hold whose line has not come is waited for
// as an acquisition would (Close: its node's clients are done).
func (n *node) settleFree(ctx context.Context, m farmem.Memory, g GCL, wait bool) error {
	n.mu.Lock()
	has := len(n.orphans[g]) > 0
	n.mu.Unlock()
	if !has {
		return nil
	}
	f := n.takeFree()
	if f == nil {
		f = n.reclaim(ctx, m) // a quarantined frame nothing can write any more
	}
	if f == nil {
		return nil
	}
	l, err := nodearea.NewLatch(m, f.latch)
	if err != nil {
		n.putFree(f)
		return err
	}
	ok, err := l.TryLock(ctx)
	if err != nil || !ok {
		n.putFree(f)
		return err
	}
	f.memo, f.lo, f.hi, f.earned = memoI, 0, 0, 0
	if !n.install(g, f) {
		n.putFree(f)
		return l.Unlock(detached(ctx))
	}
	cl := &Client{c: n.c, n: n, m: m, me: n.id, o: n.c.opts, rt: m.Runtime()}
	err = cl.settleOrphans(detached(ctx), g, true, &grantState{}, wait)
	n.unmap(f)
	if uerr := l.Unlock(detached(ctx)); err == nil {
		err = uerr
	}
	return err
}
