package race

import (
	"bytes"
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// searchOne is the Search of a key whose view (decoded with matchOnly) holds exactly one
// committed slot with its fingerprint, w, on a table without block copies and an unreplicated
// index: the common case, done without findKey's bookkeeping (the list of candidates, the
// pending reads, what the operation learnt of each block), which a Search with one candidate
// and no copy to fall back on never uses. It issues what learn would for that slot (one batch of one read of the
// block) and answers as learn and search would: the value appended to op.dst (a copy when op.dst
// is nil) if the block holds the key, ErrNotFound if it holds another key, errStale (the
// caller looks again) if the block fails validation, and learn's error if the read fails. st
// and idx are the subtable and index of the slot that held w, for the address cache (st 0:
// none, keep nothing).
func (t *Table) searchOne(ctx context.Context, op *opState, w Slot, st farmem.Addr, idx uint64) ([]byte, error) {
	w = blockKey(w)
	blk, err := t.readOne(ctx, w)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(blk.Key, op.key) {
		return nil, ErrNotFound
	}
	t.ac.keep(op, w, st, idx, blk.Stamp)
	if op.dst == nil {
		return bytes.Clone(blk.Value), nil
	}
	return append(op.dst, blk.Value...), nil
}

// readOne reads and decodes the block of slot w (a blockKey) with one batch of one read, as
// learn would for that slot: learn's error if the read fails (a batch whose failure is not its
// read's failing because the block's node is down or lost its memory drops the scratch),
// errStale (counted as a bad block) if the block fails validation. The block's value aliases
// the table's scratch, valid until its next operation.
func (t *Table) readOne(ctx context.Context, w Slot) (Block, error) {
	buf, err := t.readBlock(ctx, w, int(w.Size()))
	if err != nil {
		return Block{}, err
	}
	blk, err := DecodeBlock(w.Addr(), buf)
	if err != nil {
		t.stats.BadBlocks++
		return Block{}, errStale
	}
	return blk, nil
}

// readBlock reads the first n bytes of the block of slot w (a blockKey) into the table's
// scratch with one batch of one read, the block's lines hinted already (decodeView), and
// answers as learn would for a failed read.
func (t *Table) readBlock(ctx context.Context, w Slot, n int) ([]byte, error) {
	return t.readBlockInv(ctx, w, n, false)
}

// readBlockInv is readBlock that, with inv set, also sets the block's valid word (a writer's
// invalidation, Options.Invalidate) in the same batch, after the read: same node, in order,
// so the read sees the word as it was, as learn's does.
func (t *Table) readBlockInv(ctx context.Context, w Slot, n int, inv bool) ([]byte, error) {
	sc := t.scr
	sc.blocks = grow(sc.blocks, n)
	buf := sc.blocks[:n:n]
	b := t.batch()
	b.Read(w.Addr(), buf)
	if inv {
		b.Write(w.Addr().Add(ValidOffset), invalidBytes[:])
	}
	if err := t.doHinted(ctx, b); err != nil { // decodeView hinted the block
		// As learn: a batch whose failure is not its read's failing because the block's node
		// is down or lost its memory drops the scratch; a failed read answers its error; a
		// batch that failed while its read did not (a replicated Memory's, say) read the block.
		if !onlyBlocksDown(b, len(b.Ops)) {
			t.lost()
			return nil, fmt.Errorf("race: read KV blocks: %w", err)
		}
		// An invalidation that failed fails the operation too: its CAS must not follow.
		for i := range b.Ops {
			if _, rerr := b.Result(i); rerr != nil {
				return nil, fmt.Errorf("race: read KV blocks: %w", rerr)
			}
		}
	}
	return buf, nil
}
