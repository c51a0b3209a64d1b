package race

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Each calls fn with the key and value of every committed slot of the table, subtable by
// subtable, breadth first from the directory along child words (Audit's walk), while other
// clients may change the table: a key inserted or removed meanwhile may be missed or seen, and
// a key whose subtable is splitting may be seen twice (once frozen in the old subtable). Each
// stops at fn's first error and returns it. Blocks that fail to decode (replaced meanwhile)
// are skipped. For maintenance that visits every entry (kvstore's Swarm kind repopulating
// its objects on a restarted replica), not for consistent snapshots. Cost: one round trip per
// subtable and one per subtable's blocks.
func (t *Table) Each(ctx context.Context, fn func(key, value []byte) error) error {
	if err := t.usable(); err != nil {
		return err
	}
	if err := t.pin(ctx); err != nil {
		return err
	}
	defer t.unpin()
	if err := t.refreshAll(ctx); err != nil {
		return err
	}
	seen := make(map[farmem.Addr]bool)
	var queue []farmem.Addr
	for _, e := range t.dir {
		if st := unpackAddr(e); !seen[st] {
			seen[st] = true
			queue = append(queue, st)
		}
	}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		s, err := t.readSubtable(ctx, st, true)
		if err != nil {
			return err
		}
		for _, cw := range s.child {
			if child := unpackAddr(cw); cw != 0 && !seen[child] {
				seen[child] = true
				queue = append(queue, child)
			}
		}
		blocks := make([][]byte, len(s.words))
		var b farmem.Batch
		for i, w := range s.words {
			if w.Committed() {
				blocks[i] = make([]byte, w.Size())
				b.Read(w.Addr(), blocks[i])
			}
		}
		if len(b.Ops) > 0 {
			if err := doChunked(ctx, t.m, &b); err != nil {
				return fmt.Errorf("race: each: read blocks: %w", err)
			}
		}
		for i, w := range s.words {
			if blocks[i] == nil {
				continue
			}
			blk, err := DecodeBlock(w.Addr(), blocks[i])
			if err != nil {
				continue
			}
			if err := fn(blk.Key, blk.Value); err != nil {
				return err
			}
		}
	}
	return nil
}
