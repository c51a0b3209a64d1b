package kvstore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/swarm"
)

// SwarmStep is one step of a Swarm store's Insert or Delete and the round trips it took.
type SwarmStep struct {
	Name       string
	RoundTrips uint64
}

// SwarmInsertDeleteSteps inserts key (absent) with value and then deletes it on one pooled
// client of s, step by step as swarmIndex's Insert and Delete make them (uncontended: the
// life word's CASes win), and returns each step's round trips, so that a test can match their
// sums with the operations' totals.
func SwarmInsertDeleteSteps(ctx context.Context, s *Store, key, value []byte) (ins, del []SwarmStep, err error) {
	c, err := s.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer s.release(c, nil)
	x, ok := c.idx.(*swarmIndex)
	if !ok {
		return nil, nil, fmt.Errorf("not a swarm index")
	}
	var steps *[]SwarmStep
	step := func(name string, f func() error) error {
		before := x.m.Stats()
		err := f()
		*steps = append(*steps, SwarmStep{name, x.m.Stats().Sub(before).RoundTrips})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	steps = &ins
	bs := swarmBlockSize(x.p)
	var o *swarmObj
	err = func() error {
		var off alloc.SymOffset
		if err := step("allocate", func() error {
			var err error
			off, err = x.a.AllocSymmetric(ctx, bs, 64)
			return err
		}); err != nil {
			return err
		}
		o = &swarmObj{off: off}
		if err := step("format", func() error { return swarm.FormatQuorum(ctx, x.m, x.addrs(o.off), x.p) }); err != nil {
			return err
		}
		if err := step("open", func() error {
			var err error
			o, err = x.open(ctx, o.off)
			return err
		}); err != nil {
			return err
		}
		if err := step("write", func() error { return o.reg.Write(ctx, append([]byte{swarmLive}, value...)) }); err != nil {
			return err
		}
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], swarmAlive)
		if err := step("life word", func() error { return x.rm.Write(ctx, x.lifeAddr(o), w[:]) }); err != nil {
			return err
		}
		ref := binary.LittleEndian.AppendUint64(nil, uint64(o.off))
		return step("index insert", func() error { return x.t.Insert(ctx, x.ikey(key), ref) })
	}()
	if err != nil {
		return ins, nil, err
	}
	x.cache[string(key)] = o
	steps = &del
	err = func() error {
		if err := step("life word ALIVE to DEAD", func() error {
			prev, err := x.rm.CAS(ctx, x.lifeAddr(o), swarmAlive, swarmDead)
			if err == nil && prev != swarmAlive {
				err = fmt.Errorf("life word %#x", prev)
			}
			return err
		}); err != nil {
			return err
		}
		if err := step("tombstone", func() error { return x.tombstone(ctx, o, false) }); err != nil {
			return err
		}
		x.drop(key, o)
		if err := step("life word DEAD to UNLINKED", func() error {
			prev, err := x.rm.CAS(ctx, x.lifeAddr(o), swarmDead, swarmUnlinked)
			if err == nil && prev != swarmDead {
				err = fmt.Errorf("life word %#x", prev)
			}
			return err
		}); err != nil {
			return err
		}
		return step("index delete", func() error {
			return x.t.DeleteIf(ctx, x.ikey(key), binary.LittleEndian.AppendUint64(nil, uint64(o.off)))
		})
	}()
	return ins, del, err
}

// SwarmLapses returns how many times the Swarm index behind v (a *Store, whose one pooled
// client it borrows, or a *Session) started a step over because its lease ran out: the index's
// replicated memory's Expired locks plus the cached objects' registers' LeaseRestarts. On a
// loaded machine a client descheduled past a lease pays those round trips; a test of exact
// round trips retries an operation during which this moved.
func SwarmLapses(ctx context.Context, v any) (uint64, error) {
	var idx Index
	switch v := v.(type) {
	case *Store:
		c, err := v.acquire(ctx)
		if err != nil {
			return 0, err
		}
		defer v.release(c, nil)
		idx = c.idx
	case *Session:
		idx = v.c.idx
	}
	x, ok := idx.(*swarmIndex)
	if !ok {
		return 0, fmt.Errorf("not a swarm index")
	}
	n := x.rm.ProtocolStats().Expired
	if rm := x.t.Replicated(); rm != nil && rm != x.rm {
		n += rm.ProtocolStats().Expired
	}
	for _, o := range x.cache {
		if rep := o.reg.Replicated(); rep != nil {
			n += rep.Stats().LeaseRestarts
		}
	}
	return n, nil
}
