package kvstore

import (
	"context"
	"sync"

	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
)

// The ds/cider synchronizers. Each keeps a lock node (qlock.NodeSize bytes) in the client's
// slice of its compute node's region: handle i's at Offset + i*qlock.NodeSize, so a client's
// handles on several index instances do not share one.

// CIDER returns the Sync of CIDER (ds/cider): the far MCS lock with global write combining
// and contention-aware routing by per-compute-node credits. The Sync keeps one cider.Credits
// per compute node, shared by the store's clients on that node. It is the default.
func CIDER(opts cider.Options) Sync {
	return &ciderSync{opts: opts, credits: map[farmem.NodeID]*cider.Credits{}}
}

type ciderSync struct {
	opts    cider.Options
	mu      sync.Mutex // guards credits; held for a map access only
	credits map[farmem.NodeID]*cider.Credits
}

func (*ciderSync) Name() string { return "cider" }

func (c *ciderSync) New(_ context.Context, m farmem.Memory, i int) (ptrsync.Synchronizer, error) {
	node := m.Info().Node
	c.mu.Lock()
	cr := c.credits[node]
	if cr == nil {
		cr = cider.NewCredits(0)
		c.credits[node] = cr
	}
	c.mu.Unlock()
	o := c.opts
	o.Lock.Offset += uint64(i) * qlock.NodeSize
	s, err := cider.NewCIDER(m, cr, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// MCS returns the Sync of ds/cider's MCS baseline: every update and delete takes the key's far
// MCS lock (ds/qlock).
func MCS(opts qlock.Options) Sync { return mcsSync{opts} }

type mcsSync struct{ opts qlock.Options }

func (mcsSync) Name() string { return "mcs" }

func (s mcsSync) New(_ context.Context, m farmem.Memory, i int) (ptrsync.Synchronizer, error) {
	o := s.opts
	o.Offset += uint64(i) * qlock.NodeSize
	x, err := cider.NewMCS(m, o)
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Spin returns the Sync of ds/cider's CAS spinlock baseline.
func Spin(opts cider.SpinOptions) Sync { return spinSync{opts} }

type spinSync struct{ opts cider.SpinOptions }

func (spinSync) Name() string { return "spin" }

func (s spinSync) New(_ context.Context, m farmem.Memory, _ int) (ptrsync.Synchronizer, error) {
	x, err := cider.NewSpin(m, s.opts)
	if err != nil {
		return nil, err
	}
	return x, nil
}
