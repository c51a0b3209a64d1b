package maxreg

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/farmem/farmem/farmem"
)

// WriteBack is a write-back of a tag read that the caller carries in a batch of its own (one
// per replica, ahead of its own ops there), so that it costs no round trip of its own: Safe-
// Guess's slow path sends it with its first timestamp-lock round. It belongs to the goroutine
// that got it from WriteReadDeferred.
type WriteBack struct {
	r     *Replicated
	v     Tag
	rec   []byte
	start farmem.Time
	off   uint64 // where v's record goes in each replica (Replicated.copyOff)
	parts []install
	sure  []bool // per replica: Sure, as decided when Add put its ops in
	b     *farmem.Batch
}

// Tag returns the tag the write-back installs.
func (wb *WriteBack) Tag() Tag { return wb.v }

// OwnWord reports whether no other writer's lane maps to this handle's metadata word, so that
// its CASes, which expect the word's last value this handle saw or posted, never fail: a
// write-back carried in one batch (WriteBack.Add) then surely installs its tag on every
// replica that completes the batch.
func (r *Replicated) OwnWord() bool { return r.own }

// ownWord computes OwnWord for writer id among writers 1..writers with words metadata words.
func ownWord(t *farmem.Topology, id farmem.ClientID, writers, words int) bool {
	if writers > words {
		return false
	}
	mine := wordOf(t, id, words)
	for c := 1; c <= writers; c++ {
		if farmem.ClientID(c) != id && wordOf(t, farmem.ClientID(c), words) == mine {
			return false
		}
	}
	return true
}

// WriteReadDeferred is WriteReadWith, except that when the read half found a larger tag m that
// a majority does not hold yet, it finds m's value (the in-place copy a replica returned, else
// m's buffer: one round trip) and returns the write-back of m instead of performing it; the
// caller adds it to its next batch (WriteBack.Add, Absorb) and finishes it (Finish). A nil
// WriteBack means none is needed, or it was made otherwise: when m's lease ran out first, the
// read was completed by a full Read, as WriteReadWith does.
func (r *Replicated) WriteReadDeferred(ctx context.Context, value []byte, verified bool, minTS uint64, extra func(replica int, b *farmem.Batch)) (Tag, Tag, []bool, *WriteBack, error) {
	r.deferWB = true
	defer func() { r.deferWB = false }()
	w, m, done, err := r.write(ctx, value, verified, minTS, true, extra)
	wb := r.pendingWB
	r.pendingWB = nil
	return w, m, done, wb, err
}

// Fresh reports whether the write-back may still be posted: its lease (Params.Lease from the
// read's first verb) has not run out, so v's buffers are not yet reused.
func (wb *WriteBack) Fresh() bool {
	return wb.r.rt.Now().Sub(wb.start) <= wb.r.h.p.Lease
}

// Add puts the write-back's ops for replica i into b (nothing if replica i is known to hold the
// tag): v's record into v's buffer there, then a CAS raising this client's word to v. Call it
// for the replicas of one batch only, then post b and absorb its results with Absorb.
func (wb *WriteBack) Add(i int, b *farmem.Batch) {
	r := wb.r
	if wb.parts == nil {
		wb.parts = make([]install, r.n)
		for j := range wb.parts {
			wb.parts[j] = install{write: -1, cas: -1, read: -1, at: r.rt.Now()}
		}
		wb.sure = make([]bool, r.n)
		wb.b = b
		r.stats.WriteBacks++
		r.stats.Rounds++
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holds(i, wb.v, wb.start) {
		wb.sure[i] = true
		return
	}
	pt := &wb.parts[i]
	pt.expect = max(r.ls.word[i], r.ls.posted[i])
	wb.sure[i] = r.own && !r.ls.unsure[i] && pt.expect&^VerifiedBit == r.ls.word[i]&^VerifiedBit
	pt.write = b.Write(r.addrs[i]+farmem.Addr(wb.off), wb.rec)
	pt.cas, pt.probe = casOp(b, r.addrs[i]+metaOff+farmem.Addr(8*r.wi), pt.expect, wb.v)
	r.ls.posted[i] = max(r.ls.posted[i], wb.v)
}

// Sure reports whether replica i will hold the tag once it completes a batch the write-back
// was added to: it is known to hold it already, or this handle owns its metadata word
// (OwnWord), has no CAS in flight there and has seen the word since its last failed CAS, so
// the CAS's expectation is the word's value. (A CAS reported failed never applies later.)
func (wb *WriteBack) Sure(i int) bool { return wb.sure != nil && wb.sure[i] }

// Absorb takes in the results of the batch the write-back was added to (idempotent; hook is
// true when called from the batch's completion hook).
func (wb *WriteBack) Absorb(p *farmem.Pending, hook bool) {
	if wb.parts == nil {
		return
	}
	wb.r.absorb(p, wb.b, wb.parts, wb.v, nil, hook)
}

// Finish completes the write-back: nothing more when a majority is known to hold the tag (the
// carrying batch's replicas that completed), else further rounds, or, when the lease ran out,
// a full Read. It returns the largest tag the read half is now complete for (at least v).
func (wb *WriteBack) Finish(ctx context.Context) (Tag, error) {
	r := wb.r
	err := r.writeBack(ctx, wb.v, wb.rec, wb.start)
	if errors.Is(err, errRestart) {
		m2, _, err := r.read(ctx, nil)
		return max(wb.v, m2), err
	}
	if err != nil {
		return wb.v, err
	}
	r.supersede(wb.v)
	return wb.v, nil
}

// Probe reads replicas' metadata words inside a caller's batch and raises what the handle
// knows each replica holds, as a read's first round does.
type Probe struct {
	r     *Replicated
	b     *farmem.Batch
	parts []install
}

// NewProbe returns a probe for one batch.
func (r *Replicated) NewProbe() *Probe {
	pr := &Probe{r: r, parts: make([]install, r.n)}
	for i := range pr.parts {
		pr.parts[i] = install{write: -1, cas: -1, read: -1, at: r.rt.Now()}
	}
	return pr
}

// Add puts a read of replica i's metadata words (8 bytes each) into b, after the ops already
// there for that replica.
func (pr *Probe) Add(i int, b *farmem.Batch) {
	pr.b = b
	pr.parts[i].buf = make([]byte, 8*uint64(pr.r.h.p.Words))
	pr.parts[i].read = b.Read(pr.r.addrs[i]+metaOff, pr.parts[i].buf)
}

// Absorb takes in the probe's results from the replicas of p that are complete (idempotent).
func (pr *Probe) Absorb(p *farmem.Pending, hook bool) {
	if pr.b == nil {
		return
	}
	pr.r.absorb(p, pr.b, pr.parts, 0, nil, hook)
}

// Top returns the largest tag the probe read on replica i, and false if it put no read there
// or replica i has not completed p, the batch it was added to.
func (pr *Probe) Top(p *farmem.Pending, i int) (Tag, bool) {
	pt := pr.parts[i]
	if pr.b == nil || pt.read < 0 || !p.NodeDone(pr.r.addrs[i].Node()) {
		return 0, false
	}
	var top Tag
	for w := range pr.r.h.p.Words {
		top = max(top, Tag(binary.LittleEndian.Uint64(pt.buf[8*w:])))
	}
	return top, true
}
