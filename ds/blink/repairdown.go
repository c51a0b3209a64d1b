package blink

import (
	"context"
	"errors"
	"time"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// Online repair of a crashed compute node's holds.
//
// A compute node that crashes keeps, in the latch words of the lines it cached, its exclusive
// hold and its shared bits; every survivor that wants one of those lines sends it an
// invalidation that can never be answered. A survivor whose acquisition finds such a holder
// reported down by the fabric (the invalidation could not even be sent: selcc.HolderDownError)
// repairs that one line itself and retries: it waits until the fabric's down timeout has passed
// since this handle first saw the node down (every verb the dead node posted has then landed or
// never will, so no late release of its removes a hold twice), then removes the node's holds
// from the line's word with selcc.Client.RepairLine (one READ and one CAS; survivors repairing
// the same line at once remove each hold once). Lines nobody asks for keep the dead node's
// holds, harmlessly: the repair is lazy, one line at a time, and needs no scan of the tree and
// no quiet period (Repair, over Lines, needs both).
//
// What the dead node held dirty is not lost: under selcc.WriteBackOnRelease (the store's
// default) a line is written back before the guard that dirtied it is released, hence before
// the operation is acknowledged, so far memory holds every acknowledged write and the
// survivor's retry reads the line from there. An operation of the dead node whose guard was
// still open never returned; its write may be lost (an unknown outcome).
//
// The repair trusts the fabric's report: a node reported down at once (Send fails with
// farmem.ErrNodeDown) must be gone for good (fail-stop), as the simulator's Crash and a
// process the operator killed are. A node that is only slow or cut off is not repaired this
// way: its invalidations time out (selcc.Options.ReplyTimeout) and the operation fails, as it
// does for every index kind of the store facing a paused peer, to be retried. Costs: nothing on
// the path of an operation that meets no dead holder; a repair costs the survivor the wait
// above once per dead node and handle, one round trip to read the word and one for the CAS.
// Limits: the bitmap codec only (up to 58 compute nodes: RepairLine refuses the group codec and
// EagerForward, and the operation then fails as before).

// maxLineRepairs bounds the repairs one acquisition makes before it gives up (a line handed to
// a dead node again by a message of it delivered late needs a second one).
const maxLineRepairs = 8

// guard takes g shared or exclusive, repairing holds of compute nodes the fabric reports down.
func (t *Tree) guard(ctx context.Context, g selcc.GCL, excl bool) (*selcc.Guard, error) {
	for try := 0; ; try++ {
		var gd *selcc.Guard
		var err error
		if excl {
			gd, err = t.cl.Lock(ctx, g)
		} else {
			gd, err = t.cl.RLock(ctx, g)
		}
		var hd *selcc.HolderDownError
		if err == nil || try >= maxLineRepairs || !errors.As(err, &hd) {
			return gd, err
		}
		if rerr := t.repairDown(ctx, hd); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
	}
}

// repairDown removes hd.Node's holds from hd.Line once the fabric's down timeout has passed
// since this handle first saw the node down.
func (t *Tree) repairDown(ctx context.Context, hd *selcc.HolderDownError) error {
	m := t.cl.Memory()
	rt := m.Runtime()
	now := rt.Now()
	if t.down == nil {
		t.down = map[farmem.ComputeID]farmem.Time{}
	}
	seen, ok := t.down[hd.Node]
	if !ok {
		seen = now
		t.down[hd.Node] = now
	}
	if wait := time.Duration(seen + farmem.Time(m.Topology().DownTimeout) - now); wait > 0 {
		if err := rt.Sleep(ctx, wait); err != nil {
			return err
		}
	}
	n, err := t.cl.RepairLine(ctx, hd.Node, hd.Line)
	t.stats.Repairs += uint64(n)
	return err
}
