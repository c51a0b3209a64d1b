package race

import (
	"bytes"
	"context"
	"encoding/binary"

	"github.com/farmem/farmem/farmem"
)

// oneCandidate reports whether an Update or Delete may look for its key with findOne instead
// of findKey: its view (decoded with matchOnly, so holding only the committed slots with the
// key's fingerprint) holds exactly one, on a table without block copies, and the operation
// neither keeps its value (DeleteIf) nor reads the slot's metadata with it (a synchronizer's
// Plan.Prefetch on a table with lock words).
func (t *Table) oneCandidate(op *opState, v *view, meta bool) bool {
	return len(v.words) == 1 && op.matchOnly && !op.keepValue &&
		!(meta && t.lockSize > 0) && !t.replicated()
}

// findOne is findKey for a view oneCandidate accepts, done without learn's bookkeeping (the
// list of candidates and pending reads), which one candidate and no copy to fall back on never
// use: the common Update and Delete, as searchOne is the common Search. It reads only the
// block's head (headLen: the header and the key), and the whole block only when the head holds
// a longer key than op's, cut short; under Options.Invalidate the batch that reads the head
// sets the block's valid word after it, as learn does. It answers as findKey would: 0 if the slot's block holds
// op's key, -1 if it holds another; errStale (the caller looks again) if the head does not match
// the slot word (decodeHead); learn's error if the read fails. What it read is
// recorded in op as learn records it (a retry after a lost CAS knows the block and reads
// nothing), so the synchronizer's commit sees the same state either way.
func (t *Table) findOne(ctx context.Context, op *opState, w Slot) (int, error) {
	w = blockKey(w)
	if info, ok := op.info(w); ok {
		return oneIndex(info.isKey), nil
	}
	head, err := t.readBlockInv(ctx, w, headLen(w, len(op.key)), op.invalidate)
	if err != nil {
		return -1, err
	}
	info, ok, err := t.decodeHead(op, w, head)
	if err != nil {
		return -1, err
	}
	if !ok {
		// The head cut a longer key short (a fingerprint collision): the whole block decides,
		// its checksum checked, as findKey would read it.
		blk, err := t.readOne(ctx, w)
		if err != nil {
			return -1, err
		}
		info = blockInfo{isKey: bytes.Equal(blk.Key, op.key), deadline: blk.Deadline, stamp: blk.Stamp}
	}
	op.learnt(w, info)
	return oneIndex(info.isKey), nil
}

// decodeHead decodes the head findOne read of the block of slot w (a blockKey): what the block
// tells op, and ok false if the head holds too little of a key longer than op's to tell. A
// head whose lengths do not give the slot word's size, or whose key is another that does not
// have the slot's fingerprint, is a damaged block (errStale, counted as a bad block, as a
// failed checksum was): the key's own bytes are not taken as the answer unless they are op's.
func (t *Table) decodeHead(op *opState, w Slot, head []byte) (blockInfo, bool, error) {
	le := binary.LittleEndian
	kl, _, fits := headLengths(w, head)
	if !fits {
		t.stats.BadBlocks++
		return blockInfo{}, false, errStale
	}
	info := blockInfo{deadline: farmem.Time(le.Uint64(head[8:])), stamp: le.Uint32(head[4:])}
	if kl == len(op.key) && bytes.Equal(head[blockHeader:blockHeader+kl], op.key) {
		info.isKey = true
		return info, true, nil
	}
	if blockHeader+kl > len(head) {
		return info, false, nil
	}
	if t.fingerprint(t.hashOf(head[blockHeader:blockHeader+kl])) != w.Fingerprint() {
		t.stats.BadBlocks++
		return blockInfo{}, false, errStale
	}
	return info, true, nil
}

// oneIndex is findOne's answer: the view's only slot if it holds the key, else -1.
func oneIndex(isKey bool) int {
	if isKey {
		return 0
	}
	return -1
}

// headLen is how much of the block of slot w findOne reads for a key of kl bytes: the header
// and kl bytes after it, in whole words, or the whole block if it is shorter. That is all an
// Update or Delete needs of the block it replaces: whether it holds the key, and its insert
// lease and stamp, in the header. The rest, and the checksum over all of it, are not read: a
// committed block is written whole before any slot names it and never changed after but for
// its valid word (in the header, unused here), and it cannot be reused while the operation's
// section is pinned, which its CAS's deadline check enforces. A head whose lengths do not give
// the slot word's size, or that holds another key without the slot's fingerprint, is a bad
// block (decodeHead).
func headLen(w Slot, kl int) int {
	return int(min(w.Size(), uint64(blockHeader+kl+7)&^7))
}

// headLengths returns the key and value lengths a block's head gives, and whether they fit the
// slot word w that names the block: within MaxKV, and a block of w's size in Units.
func headLengths(w Slot, head []byte) (kl, vl int, fits bool) {
	le := binary.LittleEndian
	kl, vl = int(le.Uint16(head[0:])), int(le.Uint16(head[2:])&^sum3Flag)
	return kl, vl, kl+vl <= MaxKV && (blockSize(kl, vl)+Unit-1)/Unit == w.Units()
}
