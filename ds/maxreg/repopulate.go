package maxreg

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// RepopulateReport says what RepopulateReplica wrote on the target replica.
type RepopulateReport struct {
	// Params are the register's parameters (from the other replicas' header).
	Params Params
	// Top is the largest tag the other replicas held (zero: the register was never written),
	// whose record was copied into its buffer and the in-place copy.
	Top Tag
	// Words counts the metadata words raised on the target.
	Words int
	// Tries counts the reads of the other replicas (more than one when Top's buffer was
	// reused between the read and the chase).
	Tries int
}

// repopulateTries bounds RepopulateReplica's reads of the other replicas.
const repopulateTries = 8

// RepopulateReplica brings replica target of the replicated register at addrs (a replica
// whose memory was lost and is zeroed, or that missed the register's format) up to what a
// majority of the other replicas holds, so that it may count in quorums again: their header
// (byte for byte), every metadata word raised to the largest value they hold for it, and the
// record of the largest tag Top among them written into Top's buffer and into the in-place
// copy, ahead of the words in one ordered batch (a word naming Top is visible only with Top's
// record in place). A word is only raised (a CAS from the value read on the target), so a
// value larger than the copy's, written there meanwhile, stays.
//
// It must run while no client counts target in a quorum (the caller leaves it out of every
// handle's rounds until it returns; kvstore's Swarm kind does so): a replica that lost
// writes it had acknowledged would otherwise let a read miss them. Why the copy makes it safe
// to count target again: every write that completed before the copy's read is on a majority
// of the 2f+1 replicas, which shares a replica with the f+1 others the copy reads, so Top is
// at least that write's tag, and target holds Top or more afterwards; a write that completes
// while target is left out is on f+1 of the others, so every majority afterwards, target
// included, still shares a replica with it. So after the copy every write completed before
// it is on a majority again (target and the replica it was read from), and write-read and
// read-read monotonicity hold whichever f replicas crash next.
//
// An operation in flight across the loss and the copy (its client stalled throughout) does
// not break this: a handle counts a replica toward a majority holding a tag only on an answer
// to a batch built within Params.Lease of the other answers it counts (see evidence.go), so
// an answer of the lost memory is paired only with ops posted within the lease of it, which
// have applied within the fabric's down timeout and Skew after that. So the caller copies no
// sooner than the down timeout, the Lease and twice Skew after the loss (kvstore's Swarm kind
// waits that long once the adoption began): the copy then reads those ops' effects and
// carries them to target.
//
// Cost: the other replicas' headers (1 round trip), their metadata words and in-place records
// with the target's words (1), Top's buffer when no in-place copy held it (1), and the write
// (1, plus one per word a concurrent write raised between the read and the CAS).
func RepopulateReplica(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, target int) (RepopulateReport, error) {
	return repopulate(ctx, m, addrs, target, len(addrs)/2+1)
}

// HealReplica is RepopulateReplica for a replica that lost nothing it acknowledged but was
// never formatted (unreachable when the register was created: its block is still zero),
// while the register is in use and the replica counts in its quorums: what it copies from
// the others (their header, words raised only, the top record) is what a read's write-back
// would copy, so one other replica answering suffices, and writes landing there meanwhile
// stay (a word is only raised).
func HealReplica(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, target int) (RepopulateReport, error) {
	return repopulate(ctx, m, addrs, target, 1)
}

// repopulate is RepopulateReplica reading at least need of the other replicas.
func repopulate(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, target, need int) (RepopulateReport, error) {
	var rep RepopulateReport
	if err := checkReplicas(addrs); err != nil {
		return rep, err
	}
	if target < 0 || target >= len(addrs) {
		return rep, fmt.Errorf("%w: target replica %d of %d", ErrBadParams, target, len(addrs))
	}
	n, maj := len(addrs), need
	// The others' headers: those that answered must agree and be formatted.
	hb := make([][]byte, n)
	b := new(farmem.Batch)
	for i, a := range addrs {
		if i != target {
			hb[i] = make([]byte, hdrUsed)
			b.Read(a, hb[i])
		}
	}
	_ = m.Do(ctx, b)
	var raw []byte
	got := 0
	for i, k := 0, 0; i < n; i++ {
		if i == target {
			continue
		}
		if _, err := b.Result(k); err == nil {
			if raw != nil && string(raw) != string(hb[i]) {
				return rep, fmt.Errorf("maxreg: repopulate: %w: replicas' headers differ", ErrNotFormatted)
			}
			raw = hb[i]
			got++
		}
		k++
	}
	if got < maj {
		return rep, fmt.Errorf("maxreg: repopulate: %d of the other replicas answered: %w", got, ErrNoQuorum)
	}
	h, err := decodeHeader(raw)
	if err != nil {
		return rep, fmt.Errorf("maxreg: repopulate: %w", err)
	}
	rep.Params = h.p
	l := layoutOf(h.p)
	seed := hashSeed ^ h.nonce
	words := uint64(h.p.Words)
	for rep.Tries < repopulateTries {
		rep.Tries++
		// Every other replica's words and in-place record; the target's words.
		b := new(farmem.Batch)
		bufs := make([][]byte, n)
		idx := make([]int, n)
		for i, a := range addrs {
			if i == target {
				bufs[i] = make([]byte, 8*words)
			} else {
				bufs[i] = make([]byte, 8*words+l.recSize)
			}
			idx[i] = b.Read(a+metaOff, bufs[i])
		}
		_ = m.Do(ctx, b)
		if _, err := b.Result(idx[target]); err != nil {
			return rep, fmt.Errorf("maxreg: repopulate: read the target: %w", err)
		}
		want := make([]Tag, words)
		var top Tag
		var holders []int
		answered := 0
		for i := range n {
			if i == target {
				continue
			}
			if _, err := b.Result(idx[i]); err != nil {
				continue
			}
			answered++
			var t Tag
			for w := range words {
				x := Tag(binary.LittleEndian.Uint64(bufs[i][8*w:]))
				want[w] = max(want[w], x)
				t = max(t, x)
			}
			switch {
			case t > top:
				top, holders = t, []int{i}
			case t == top:
				holders = append(holders, i)
			}
		}
		if answered < maj {
			return rep, fmt.Errorf("maxreg: repopulate: %d of the other replicas answered: %w", answered, ErrNoQuorum)
		}
		rep.Top = top
		var rec []byte
		if top != 0 {
			// Top's record: an in-place copy that names it, else its buffer.
			for _, i := range holders {
				r := bufs[i][8*words:]
				if id, _, err := openRecord(r, seed, h.p.ValueSize); err == nil && id == top.identity() {
					rec = r
					break
				}
			}
			if rec == nil {
				cb := new(farmem.Batch)
				rbs := make([][]byte, len(holders))
				for j, i := range holders {
					rbs[j] = make([]byte, l.recSize)
					cb.Read(addrs[i]+farmem.Addr(l.slotOff(top)), rbs[j])
				}
				_ = m.Do(ctx, cb)
				for j := range holders {
					if _, err := cb.Result(j); err != nil {
						continue
					}
					if id, _, err := openRecord(rbs[j], seed, h.p.ValueSize); err == nil && id == top.identity() {
						rec = rbs[j]
						break
					}
				}
			}
			if rec == nil {
				continue // Top's buffer was reused: a newer write superseded it; read again.
			}
		}
		// The copy: header, Top's record in its buffer and in place, then the words raised.
		tgt := addrs[target]
		wb := new(farmem.Batch)
		wb.Write(tgt, raw)
		if rec != nil {
			wb.Write(tgt+farmem.Addr(l.slotOff(top)), rec)
			wb.Write(tgt+farmem.Addr(l.inOff), rec)
		}
		have := make([]Tag, words)
		for w := range words {
			have[w] = Tag(binary.LittleEndian.Uint64(bufs[target][8*w:]))
		}
		if err := raiseWords(ctx, m, tgt, wb, want, have, &rep.Words); err != nil {
			return rep, err
		}
		return rep, nil
	}
	return rep, fmt.Errorf("maxreg: repopulate: the largest tag's buffer was reused in each of %d reads: %w", repopulateTries, ErrNoQuorum)
}

// raiseWords posts b (ops to the target ahead of its words) with a CAS of every metadata word
// at tgt whose value have is below want, and retries the CASes that found another value below
// want, from that value, until each word holds want or more. It counts the words it raised.
func raiseWords(ctx context.Context, m farmem.Memory, tgt farmem.Addr, b *farmem.Batch, want, have []Tag, raised *int) error {
	for {
		var ws []int
		var ops []int
		for w := range want {
			if have[w] < want[w] && len(b.Ops) < farmem.MaxBatchOps {
				ws = append(ws, w)
				ops = append(ops, b.CAS(tgt+metaOff+farmem.Addr(8*w), uint64(have[w]), uint64(want[w])))
			}
		}
		if len(b.Ops) == 0 {
			return nil
		}
		if err := m.Do(ctx, b); err != nil {
			return fmt.Errorf("maxreg: repopulate: write the target: %w", err)
		}
		again := false
		for j, w := range ws {
			prev, _ := b.Result(ops[j])
			if Tag(prev) == have[w] {
				*raised++
				have[w] = want[w]
				continue
			}
			// Words only rise: a failed CAS found a strictly larger value; one at or above
			// the copy's is left as it is.
			have[w] = min(Tag(prev), want[w])
		}
		for w := range want {
			again = again || have[w] < want[w]
		}
		if !again {
			return nil
		}
		b = new(farmem.Batch)
	}
}
