package race

import (
	"bytes"
	"context"
)

// oneCandidate reports whether an Update or Delete may look for its key with findOne instead
// of findKey: its view (decoded with matchOnly, so holding only the committed slots with the
// key's fingerprint) holds exactly one, on a table without block copies, and the operation
// neither invalidates the block it reads (Options.Invalidate), nor keeps its value (DeleteIf),
// nor reads the slot's metadata with it (a synchronizer's Plan.Prefetch on a table with lock
// words).
func (t *Table) oneCandidate(op *opState, v *view, meta bool) bool {
	return len(v.words) == 1 && op.matchOnly && !op.invalidate && !op.keepValue &&
		!(meta && t.lockSize > 0) && !t.replicated()
}

// findOne is findKey for a view oneCandidate accepts, done without learn's bookkeeping (the
// list of candidates and pending reads), which one candidate and no copy to fall back on never
// use: the common Update and Delete, as searchOne is the common Search. It answers as findKey
// would: 0 if the slot's block holds op's key, -1 if it holds another; errStale (the caller
// looks again) if the block fails validation; learn's error if the read fails. What it read is
// recorded in op as learn records it (a retry after a lost CAS knows the block and reads
// nothing), so the synchronizer's commit sees the same state either way.
func (t *Table) findOne(ctx context.Context, op *opState, w Slot) (int, error) {
	w = blockKey(w)
	if info, ok := op.info(w); ok {
		return oneIndex(info.isKey), nil
	}
	blk, err := t.readOne(ctx, w)
	if err != nil {
		return -1, err
	}
	info := blockInfo{isKey: bytes.Equal(blk.Key, op.key), deadline: blk.Deadline, stamp: blk.Stamp}
	op.learnt(w, info)
	return oneIndex(info.isKey), nil
}

// oneIndex is findOne's answer: the view's only slot if it holds the key, else -1.
func oneIndex(isKey bool) int {
	if isKey {
		return 0
	}
	return -1
}
