package swarm

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
)

// RepopulateReport says what Repopulate wrote on the target replica.
type RepopulateReport struct {
	// Register is the In-n-Out part's copy (maxreg.RepopulateReplica).
	Register maxreg.RepopulateReport
	// Locks counts the timestamp-lock words raised on the target.
	Locks int
}

// Repopulate brings replica target of the register at addrs (a memory node that restarted
// empty, or that missed the register's format) up to what a majority of the other replicas
// hold, so that it may count in quorums again: the max register M (maxreg.RepopulateReplica:
// header, metadata words, the largest tuple's record) and then every writer's timestamp-lock
// word, raised by CAS to the largest value a majority of the others hold for it.
//
// Like maxreg.RepopulateReplica, it must run while no handle counts target in a quorum. Why
// the lock words copied so keep TRYLOCK's guarantee (TRYLOCK(ts, READ) and TRYLOCK(ts, WRITE)
// never both true): a TRYLOCK that returned true had a majority of words holding exactly its
// (ts, mode); if that majority included the lost replica, it also included one of the others,
// which still holds (ts, mode) or a larger timestamp (a word never goes back). The copy reads
// a majority of the others, so the value it raises target to is at least (ts, mode) when that
// replica answered it; a word's timestamp never switches mode, so target then holds (ts,
// mode) or a larger timestamp, and a TRYLOCK of ts in the other mode that counts target
// fails, as it would have with the lost copy. When two of the others hold one largest
// timestamp in both modes (a reader and the writer raced for it), the copy takes WRITE, the
// larger word: if the reader's lock had won through the lost replica, the writer's own lock on
// that timestamp has already seen the reader's mode on the other replica (a writer locks its
// guess once, and waits for every replica of a round before the next), and later readers of
// that timestamp fail on target, which TRYLOCK allows (both may fail).
//
// A TRYLOCK that read the lost replica before it crashed counts that answer only with answers
// to rounds it posted within Params.Lease of its first (a later round starts a new attempt
// that counts only its own answers: see tryLock). So the caller must copy no sooner than the
// fabric's down timeout plus Lease plus twice Skew after the loss (kvstore's Swarm kind waits
// that long after the node's adoption began): every CAS such a TRYLOCK counts has then
// applied on the replicas the copy reads, and the copy carries its (ts, mode) to target, so
// no lock is won through target against it. A copy made sooner may pair that answer with a
// lock won through target afterwards.
//
// Cost: RepopulateReplica's, then one round trip reading the lock words (8 bytes per writer)
// of every replica and one raising the target's.
func Repopulate(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, target int) (RepopulateReport, error) {
	return repopulate(ctx, m, addrs, target, false)
}

// Heal is Repopulate for a replica that lost nothing but was never formatted (unreachable
// when the register was created), while handles use the register and count the replica
// (maxreg.HealReplica): it reads as many of the others as answer (one suffices) and raises a
// lock word only to a larger timestamp than the one it holds, so a word never switches mode
// for one timestamp (the lock's safety: the value copied is one another replica's word
// holds, as a locker's CAS could have put there).
func Heal(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, target int) (RepopulateReport, error) {
	return repopulate(ctx, m, addrs, target, true)
}

func repopulate(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, target int, heal bool) (RepopulateReport, error) {
	var rep RepopulateReport
	copyReg := maxreg.RepopulateReplica
	if heal {
		copyReg = maxreg.HealReplica
	}
	rr, err := copyReg(ctx, m, addrs, target)
	rep.Register = rr
	if err != nil {
		return rep, fmt.Errorf("swarm: repopulate: %w", err)
	}
	p := withWriters(rr.Params)
	base := maxreg.Size(p)
	n, maj := len(addrs), len(addrs)/2+1
	if heal {
		maj = 1
	}
	lb := lockBytes(p)
	b := new(farmem.Batch)
	bufs := make([][]byte, n)
	for i, a := range addrs {
		bufs[i] = make([]byte, lb)
		b.Read(a+farmem.Addr(base), bufs[i])
	}
	_ = m.Do(ctx, b)
	if _, err := b.Result(target); err != nil {
		return rep, fmt.Errorf("swarm: repopulate: read the target's lock words: %w", err)
	}
	want := make([]uint64, p.Writers)
	answered := 0
	for i := range n {
		if i == target {
			continue
		}
		if _, err := b.Result(i); err != nil {
			continue
		}
		answered++
		for w := range want {
			want[w] = max(want[w], binary.LittleEndian.Uint64(bufs[i][8*w:]))
		}
	}
	if answered < maj {
		return rep, fmt.Errorf("swarm: repopulate: %d of the other replicas answered: %w", answered, maxreg.ErrNoQuorum)
	}
	have := make([]uint64, p.Writers)
	for w := range have {
		have[w] = binary.LittleEndian.Uint64(bufs[target][8*w:])
		if lockTS(want[w]) <= lockTS(have[w]) {
			want[w] = have[w] // never a mode switch at one timestamp
		}
	}
	lock0 := addrs[target] + farmem.Addr(base)
	for {
		cb := new(farmem.Batch)
		var ws, ops []int
		for w := range want {
			if have[w] < want[w] && len(cb.Ops) < farmem.MaxBatchOps {
				ws = append(ws, w)
				ops = append(ops, cb.CAS(lock0+farmem.Addr(8*w), have[w], want[w]))
			}
		}
		if len(ws) == 0 {
			return rep, nil
		}
		if err := m.Do(ctx, cb); err != nil {
			return rep, fmt.Errorf("swarm: repopulate: raise the target's lock words: %w", err)
		}
		for j, w := range ws {
			prev, _ := cb.Result(ops[j])
			if prev == have[w] {
				rep.Locks++
				have[w] = want[w]
			} else {
				// A lock word only rises: each failure finds a strictly larger one, and one
				// at or above the copy's value is left as it is.
				have[w] = prev
				if lockTS(prev) >= lockTS(want[w]) {
					have[w] = want[w] // as large a timestamp: leave it, whatever its mode
				}
			}
		}
	}
}
