package cxl

import (
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
)

// Status reads the region's compute-id table and mailboxes. It fences nothing: a dead
// holder's lease stays as it is until a caller or an attach acts on it.
func (r *Region) Status() (Status, error) {
	m := r.m
	var st Status
	err := atomics.Guard(func() {
		now := m.nowRel()
		for c := 1; c < len(m.comp); c++ {
			s := &m.comp[c]
			w := atomic.LoadUint64(s.lease())
			exp, gen := leaseExp(w), leaseGen(w)
			cs := ComputeStatus{ID: farmem.ComputeID(c), Gen: gen, Free: exp == expFree, Crashed: exp == expCrashed}
			if ident := atomic.LoadUint64(s.word(entIdent)); uint32(ident>>32) == gen {
				cs.PID = int(uint32(ident))
			}
			if exp > expCrashed {
				cs.Expires = time.UnixMilli(m.h.EpochMs + int64(exp) - relBase)
				cs.Live = exp > now && !m.holderDead(s, gen)
			}
			for i := range int(m.h.Mailboxes) {
				sl := m.slot(s, i)
				v := atomic.LoadUint32(sl.st())
				tok := atomic.LoadUint64(sl.owner())
				if stPhase(v) == phFree && tok == 0 {
					continue
				}
				oc, og := tokenNode(tok)
				ms := MailboxStatus{Slot: i, Owner: oc, OwnerGen: og, Abandoned: stFlags(v)&flagAbandoned != 0}
				if p := stPhase(v); int(p) < len(phaseNames) {
					ms.Phase = phaseNames[p]
				}
				cs.Mailboxes = append(cs.Mailboxes, ms)
			}
			st.Compute = append(st.Compute, cs)
		}
	})
	return st, err
}
