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
// readOne would have for the first failure among them. l.rmu is held.
func (l *tlink) resultRun(h wire.Header, total int) (done bool, err error) {
	buf, _ := l.br.Peek(l.br.Buffered()) // (no read: only what is buffered)
	run := append(l.run[:0], runFrame{h, buf[wire.HeaderSize:total]})
	for off := total; len(run) < maxRun && len(buf)-off >= wire.HeaderSize; {
		nh, err := wire.ParseHeader(buf[off:off+wire.HeaderSize], wire.DefaultMaxFrame)
		end := off + wire.HeaderSize + int(nh.Len)
		if err != nil || nh.Type != wire.TypeResult || end > len(buf) {
			break // (a bad header is reported when readOne meets it)
		}
		run = append(run, runFrame{nh, buf[off+wire.HeaderSize : end]})
		off = end
	}
	l.run = run[:0]
	if len(run) < 2 {
		return false, nil
	}
	sls := l.releaseRun(run, l.runSl[:0])
	defer func() {
		clear(sls) // (no batch is kept alive by the scratch)
		l.runSl = sls[:0]
	}()
	if len(sls) == 0 {
		return false, nil // (readOne takes the first frame alone)
	}
	l.pinged.Store(false)
	// The bytes the run's ops receive if all succeed, counted before any of it completes: one
	// addition per client (a shared link's runs answer several).
	var in uint64
	c := sls[0].q.c
	for i := range sls {
		if sls[i].q.c != c {
			c.Counters.ReceiveAhead(in)
			c, in = sls[i].q.c, 0
		}
		in += aheadIn(sls[i])
	}
	c.Counters.ReceiveAhead(in)
	consumed := 0
	for i := range sls {
		consumed += wire.HeaderSize + len(run[i].p)
		if err = l.resultOf(sls[i], run[i].h, run[i].p, &l.rs); err != nil {
			// The connection fails with err; the frames after this one were freed with it
			// and fail here, as a failing connection fails the requests it still holds.
			e := fmt.Errorf("rdma: %v: %w: %w", l.p.id, farmem.ErrNodeDown, err)
			for _, sl := range sls[i+1:] {
				failAhead(sl.q.c, sl, e)
			}
			break
		}
	}
	if err == nil && len(sls) < len(run) && !l.shared {
		err = errUnknownResult(run[len(sls)].h.ID)
	}
	// (on a shared link, a frame that answers nothing outstanding is left to readOne, which
	// drops it)
	_, _ = l.br.Discard(consumed)
	if errors.Is(err, wire.ErrMalformed) {
		return true, l.protoErr(err)
	}
	return true, err
}

// releaseRun frees the slots the frames of run answer, in order, under one lock, appending what
// each held to dst; it stops at the first frame that answers no outstanding batch request.
func (l *tlink) releaseRun(run []runFrame, dst []qslot) []qslot {
	recv := l.lastRecv.Load()
	var buf [4]*tcpQP
	wake := buf[:0] // the channels with a goroutine waiting for a slot
	l.mu.Lock()
	for _, f := range run {
		i, ok := l.slotOf(f.h.ID, false)
		if !ok {
			break
		}
		sl, w := l.takeOutLocked(i, recv)
		if w && (len(wake) == 0 || wake[len(wake)-1] != sl.q) {
			wake = append(wake, sl.q)
		}
		dst = append(dst, sl)
	}
	l.outstanding.Add(-int32(len(dst)))
	l.mu.Unlock()
	for _, q := range wake {
		select {
		case q.slotCh <- struct{}{}:
		default:
		}
	}
	return dst
}
