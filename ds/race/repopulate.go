package race

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
)

// RepopulateReport says what Table.Repopulate copied.
type RepopulateReport struct {
	// Subtables and Blocks count the subtables and KV blocks it visited (besides the root and
	// directory).
	Subtables, Blocks int
	// Words counts the words examined and copied (see replmem.CopyReport).
	Words replmem.CopyReport
}

// repopulateTries is how often Repopulate copies a range while words of it were being
// written (skipped); from the second try on it first pauses Options.Backoff, doubling up to
// repopulateMaxPause, so that a writer slowed down (a loaded machine) has released its words.
const repopulateTries = 10

// repopulateMaxPause bounds Repopulate's pause between two copies of a range.
const repopulateMaxPause = 4 * time.Millisecond

// Repopulate copies to memory node node, one of a replicated table's replicas that restarted
// empty (once the fabric lets clients reach it again) or missed writes while it was
// unreachable, every word it should hold: the root, the directory, every subtable the
// directory or a child word names, and the KV block of every slot, each from the other
// replicas (the largest version they hold: replmem.Memory.Repopulate), while other clients use
// the table.
//
// What concurrent clients do meanwhile: they include node in their batches as soon as it
// answers. Its words hold version 0 until copied (or written), and a word at version 0 never
// counts toward a lock round's majority, so every operation stays linearizable and completes
// as long as f+1 of the other replicas are up: reads agree on the others' copies, writes lock
// node's copy with the others' and bring it up to date. Words written while Repopulate runs
// reach node through their writes (new subtables and blocks are written to every replica that
// answers; a replicated table writes a KV block's whole Unit-rounded extent, so no word a
// reader reads is left from the block's previous life, which Repopulate never copied). A word
// that is being written when Repopulate reads it is read again, after a pause doubling from
// Options.Backoff (up to repopulateTries times, some 20ms of pauses in all), then left to the
// next write or repairing read (RepopulateReport.Words.Skipped counts those). Once Repopulate
// returns, node holds every word of the table it walked at a version at least as recent as the
// latest one the others held when it was copied, and counts in the quorums again: with node
// repopulated, the table again survives f other replicas crashing. It walks the table twice,
// Options.PinBudget apart, so that the second walk finds what operations begun before node was
// reachable published late (a block they wrote to the others only). An operation that keeps
// retrying past a pin budget re-pins and writes its block again (Table.fresh), so a block
// published after the second walk passed its slot was written while node was reachable, to
// node too. Not covered: a block whose write to node failed while node was reachable (node
// answered the others' batches but not that one) stays on the other replicas only until
// rewritten or repaired by a read, so with another replica down its key fails with ErrNoQuorum
// (never a wrong value).
//
// Cost: three round trips per 128 words of each subtable, directory and root, and per KV
// block, with their reads from every replica; plus a read of each subtable's slots.
// It fails with farmem.ErrInvalid on an unreplicated table or a node that holds no replica.
func (t *Table) Repopulate(ctx context.Context, node farmem.NodeID) (RepopulateReport, error) {
	var rep RepopulateReport
	if err := t.usable(); err != nil {
		return rep, err
	}
	rm := t.Replicated()
	if rm == nil || !slices.Contains(rm.Replicas(), node) {
		return rep, fmt.Errorf("race: repopulate %v: not a replica of the table: %w", node, farmem.ErrInvalid)
	}
	copyRange := func(a farmem.Addr, n uint64) error {
		var last replmem.CopyReport
		pause := t.opts.Backoff
		for try := range repopulateTries {
			if try > 0 {
				if err := t.rt.Sleep(ctx, pause); err != nil {
					return err
				}
				pause = min(2*pause, repopulateMaxPause)
			}
			c, err := rm.Repopulate(ctx, node, a, int(n))
			if err != nil {
				return fmt.Errorf("race: repopulate %v at %v: %w", node, a, err)
			}
			if try == 0 {
				rep.Words.Words += c.Words
			}
			rep.Words.Copied += c.Copied
			last = c
			if c.Skipped == 0 {
				break
			}
		}
		rep.Words.Current += last.Current
		rep.Words.Skipped += last.Skipped
		return nil
	}
	// Two passes, a pin budget apart: the second copies what the first could not see yet,
	// the words of operations that began before node was reachable again.
	for pass := range 2 {
		if pass == 1 {
			rep.Subtables, rep.Blocks = 0, 0
			if err := t.rt.Sleep(ctx, t.opts.PinBudget+t.opts.ClockSkew); err != nil {
				return rep, err
			}
		}
		if err := t.repopulatePass(ctx, copyRange, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// repopulatePass is one walk of Repopulate over the table, copying each range with copyRange.
func (t *Table) repopulatePass(ctx context.Context, copyRange func(farmem.Addr, uint64) error, rep *RepopulateReport) error {
	if err := copyRange(t.root, RootSize); err != nil {
		return err
	}
	info, err := t.Info(ctx)
	if err != nil {
		return err
	}
	if err := copyRange(info.Dir, max(uint64(8)<<info.GlobalDepth, Unit)); err != nil {
		return err
	}
	// Every subtable the directory names, and their descendants through child words.
	dir := make([]byte, max(8<<info.GlobalDepth, Unit))
	if err := t.m.Read(ctx, info.Dir, dir[:8<<info.GlobalDepth]); err != nil {
		return fmt.Errorf("race: repopulate: read directory: %w", err)
	}
	seen := map[farmem.Addr]bool{}
	var queue []farmem.Addr
	for i := range 1 << info.GlobalDepth {
		if st := unpackAddr(binary.LittleEndian.Uint64(dir[8*i:])); st != 0 && !seen[st] {
			seen[st] = true
			queue = append(queue, st)
		}
	}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		if err := copyRange(st, t.geo.size); err != nil {
			return err
		}
		rep.Subtables++
		s, err := t.readSubtable(ctx, st, true)
		if err != nil {
			return err
		}
		for _, c := range s.child {
			if ch := unpackAddr(c); ch != 0 && !seen[ch] {
				seen[ch] = true
				queue = append(queue, ch)
			}
		}
		for _, w := range s.words {
			if w.Empty() {
				continue
			}
			if err := copyRange(w.Addr(), w.Size()); err != nil {
				return err
			}
			rep.Blocks++
		}
	}
	return nil
}
