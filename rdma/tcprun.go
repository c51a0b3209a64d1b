package rdma

import (
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// maxRun bounds the Result frames resultRun completes together.
const maxRun = 128

// runFrame is one whole Result frame in the read buffer, in a run resultRun completes.
type runFrame struct {
	h wire.Header
	p []byte
}

// resultRun completes a run of consecutive Result frames that the read buffer holds whole,
// starting with the next one (h, total bytes, known whole), freeing all their slots under one
// lock of the queue pair rather than one per frame (a pipelining client reads tens of answers
// in one read of the socket). It reports done false, having consumed nothing, when the buffer
// holds only that frame whole; otherwise it consumes the frames it completed and returns what
// readOne would have for the first failure among them. q.rmu is held.
func (q *tcpQP) resultRun(h wire.Header, total int) (done bool, err error) {
	buf, _ := q.br.Peek(q.br.Buffered()) // (no read: only what is buffered)
	run := append(q.run[:0], runFrame{h, buf[wire.HeaderSize:total]})
	for off := total; len(run) < maxRun && len(buf)-off >= wire.HeaderSize; {
		nh, err := wire.ParseHeader(buf[off:off+wire.HeaderSize], wire.DefaultMaxFrame)
		end := off + wire.HeaderSize + int(nh.Len)
		if err != nil || nh.Type != wire.TypeResult || end > len(buf) {
			break // (a bad header is reported when readOne meets it)
		}
		run = append(run, runFrame{nh, buf[off+wire.HeaderSize : end]})
		off = end
	}
	q.run = run[:0]
	if len(run) < 2 {
		return false, nil
	}
	sls := q.releaseRun(run, q.runSl[:0])
	defer func() {
		clear(sls) // (no batch is kept alive by the scratch)
		q.runSl = sls[:0]
	}()
	q.pinged.Store(false)
	var in uint64
	for i := range sls {
		in += aheadIn(sls[i])
	}
	q.c.Counters.ReceiveAhead(in) // one addition for the run, before any of it completes
	consumed := 0
	for i := range sls {
		consumed += wire.HeaderSize + len(run[i].p)
		if err = q.resultOf(sls[i], run[i].h, run[i].p, &q.rs); err != nil {
			// The connection fails with err; the frames after this one were freed with it
			// and fail here, as a failing connection fails the requests it still holds.
			e := fmt.Errorf("rdma: %v: %w: %w", q.p.id, farmem.ErrNodeDown, err)
			for _, sl := range sls[i+1:] {
				failAhead(q.c, sl, e)
			}
			break
		}
	}
	if err == nil && len(sls) < len(run) {
		err = errUnknownResult(run[len(sls)].h.ID)
	}
	_, _ = q.br.Discard(consumed)
	if errors.Is(err, wire.ErrMalformed) {
		return true, q.protoErr(err)
	}
	return true, err
}

// releaseRun frees the slots the frames of run answer, in order, under one lock, appending what
// each held to dst; it stops at the first frame that answers no outstanding batch request.
func (q *tcpQP) releaseRun(run []runFrame, dst []qslot) []qslot {
	q.mu.Lock()
	for _, f := range run {
		i, gen := uint32(f.h.ID), uint32(f.h.ID>>32)
		if int(i) >= len(q.slots) || !q.slots[i].busy || q.slots[i].gen != gen || q.slots[i].call != nil {
			break
		}
		sl := q.slots[i]
		q.slots[i] = qslot{gen: gen}
		q.free = append(q.free, i)
		// Batch frames are answered in order: this answer confirms every frame up to it.
		q.confirmed = max(q.confirmed, sl.seq)
		dst = append(dst, sl)
	}
	q.outstanding.Add(-int32(len(dst)))
	wake := q.slotWaiters > 0 && len(dst) > 0
	q.mu.Unlock()
	if wake {
		select {
		case q.slotCh <- struct{}{}:
		default:
		}
	}
	return dst
}
