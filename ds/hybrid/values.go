package hybrid

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// MaxValue is the largest value of a tree with Params.BlockValues: a block (an 8-byte length
// and the bytes, padded to 8) of at most 2,047 words, its size carried in the pointer word so
// a reader fetches it in one read.
const MaxValue = 2047*8 - 8

// Pointer words of block values: bits 0-44 the block's offset / 8, bits 45-52 its memory
// node, bits 53-63 its size in words. 0 is no block.
func packBlock(a farmem.Addr, words uint64) (uint64, error) {
	w, err := packEntry(0, 0, a)
	if err != nil {
		return 0, err
	}
	return w | words<<entKindSh, nil
}

func blockAddr(w uint64) farmem.Addr { return entAddr(w &^ (0x7ff << entKindSh)) }
func blockWords(w uint64) uint64     { return w >> entKindSh }

// extra is what an IDU's first round trip carries besides the Spear FAA and the leaf's head:
// the value array's read, and a new block's write.
type extra struct {
	tail    []byte
	block   farmem.Addr
	img     []byte
	written bool
}

func errBlockMode(op string) error {
	return fmt.Errorf("hybrid: %s on a tree whose values are blocks (use the Bytes methods): %w", op, farmem.ErrInvalid)
}

func errWordMode(op string) error {
	return fmt.Errorf("hybrid: %s on a tree whose values are 8-byte words: %w", op, farmem.ErrInvalid)
}

// newBlock allocates and encodes v's block.
func (t *Tree) newBlock(ctx context.Context, v []byte) (*extra, uint64, error) {
	if len(v) > MaxValue {
		return nil, 0, fmt.Errorf("hybrid: value of %d bytes over MaxValue %d: %w", len(v), MaxValue, farmem.ErrInvalid)
	}
	words := uint64(1 + (len(v)+7)/8)
	a, err := t.a.Alloc(ctx, 8*words, 8)
	if err != nil {
		return nil, 0, err
	}
	img := make([]byte, 8*words)
	le.PutUint64(img, uint64(len(v)))
	copy(img[8:], v)
	p, err := packBlock(a, words)
	if err != nil {
		_ = t.a.Free(a, 8*words)
		return nil, 0, err
	}
	return &extra{block: a, img: img}, p, nil
}

// pinned runs f pinned by the allocator's epochs, so that no block f reads is reused meanwhile.
func (t *Tree) pinned(ctx context.Context, f func() error) error {
	if err := t.a.Pin(ctx); err != nil {
		return fmt.Errorf("hybrid: pin: %w", err)
	}
	err := f()
	if uerr := t.a.Unpin(); uerr != nil && err == nil {
		err = fmt.Errorf("hybrid: unpin: %w", uerr)
	}
	return err
}

// retire hands a block that was swapped out of a value word to the allocator's deferred free.
func (t *Tree) retire(ctx context.Context, p uint64) {
	if p == 0 {
		return
	}
	_ = t.a.Retire(ctx, blockAddr(p), 8*blockWords(p))
}

// GetBytes returns k's value in a tree with Params.BlockValues. Warm cache: 2 round trips (the
// leaf as Get reads it; the block).
func (t *Tree) GetBytes(ctx context.Context, key []byte) ([]byte, error) {
	k, err := decodeKey(key)
	if err != nil {
		return nil, err
	}
	if !t.blocks {
		return nil, errWordMode("GetBytes")
	}
	t.st.Gets++
	var out []byte
	err = t.pinned(ctx, func() error {
		p, err := t.get(ctx, k)
		if err != nil {
			return err
		}
		if p == 0 {
			// The key was read committed, its value word after a delete cleared it: the
			// delete came first.
			return ErrNotFound
		}
		buf := make([]byte, 8*blockWords(p))
		if err := t.m.Read(ctx, blockAddr(p), buf); err != nil {
			return fmt.Errorf("hybrid: get: %w", err)
		}
		if len(buf) < 8 || le.Uint64(buf) > uint64(len(buf)-8) {
			return fmt.Errorf("%w: block %v of %d words", ErrCorrupt, blockAddr(p), blockWords(p))
		}
		out = buf[8 : 8+le.Uint64(buf)]
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InsertBytes stores k with value v if k is absent, in a tree with Params.BlockValues. Warm
// cache, room in the leaf: 3 round trips, the block written with the first; the value word is
// set by CAS with the commit.
func (t *Tree) InsertBytes(ctx context.Context, key, v []byte) error {
	k, err := decodeKey(key)
	if err != nil {
		return err
	}
	if !t.blocks {
		return errWordMode("InsertBytes")
	}
	t.st.Inserts++
	x, p, err := t.newBlock(ctx, v)
	if err != nil {
		return err
	}
	err = t.pinned(ctx, func() error { return t.insert(ctx, k, p, x) })
	if errors.Is(err, ErrExists) {
		_ = t.a.Free(x.block, uint64(len(x.img))) // never published
	}
	return err
}

// UpdateBytes stores v as k's value in a tree with Params.BlockValues. Warm cache: 2 round
// trips (the new block's write, the Spear FAA, the leaf's head, keys and values in one batch;
// the CAS of the value word to the new block, the release posted unsignaled after it). A CAS
// lost to another update is retried from the word it found (one more round trip each); the
// block swapped out is retired through the allocator's epochs.
func (t *Tree) UpdateBytes(ctx context.Context, key, v []byte) error {
	k, err := decodeKey(key)
	if err != nil {
		return err
	}
	if !t.blocks {
		return errWordMode("UpdateBytes")
	}
	t.st.Updates++
	if len(v) > MaxValue {
		return fmt.Errorf("hybrid: value of %d bytes over MaxValue %d: %w", len(v), MaxValue, farmem.ErrInvalid)
	}
	if t.sync != nil {
		return t.updateSync(ctx, k, v)
	}
	x, p, err := t.newBlock(ctx, v)
	if err != nil {
		return err
	}
	x.tail = make([]byte, leafSize(t.s)-leafValsOff(t.s))
	published := false
	err = t.pinned(ctx, func() error {
		la, i, lf, err := t.enterKey(ctx, k, x, "update")
		if err != nil {
			return err
		}
		defer t.release(ctx, la)
		old := lf.vals[i]
		if old == 0 {
			return ErrNotFound // a delete cleared the value after we read the key
		}
		for {
			prev, err := t.m.CAS(ctx, leafValAddr(la, t.s, i), old, p)
			if err != nil {
				return fmt.Errorf("hybrid: update: %w", err)
			}
			if prev == old {
				published = true
				t.retire(ctx, old)
				return nil
			}
			if prev == 0 { // a delete took the value: it came first
				return ErrNotFound
			}
			old = prev
		}
	})
	if !published && x.written && errors.Is(err, ErrNotFound) {
		_ = t.a.Free(x.block, uint64(len(x.img)))
	}
	return err
}

// deleteBlock deletes k in a tree with Params.BlockValues: the key's tombstone CAS and the
// value word's CAS to 0 in one batch (2 round trips warm), retrying the second from the word
// it found if an update swapped it meanwhile; the block swapped out is retired.
func (t *Tree) deleteBlock(ctx context.Context, k uint64) error {
	return t.pinned(ctx, func() error {
		x := &extra{tail: make([]byte, leafSize(t.s)-leafValsOff(t.s))}
		la, i, lf, err := t.enterKey(ctx, k, x, "delete")
		if err != nil {
			return err
		}
		defer t.release(ctx, la)
		old := lf.vals[i]
		if old == 0 {
			return ErrNotFound // another delete cleared the value after we read the key
		}
		var b farmem.Batch
		b.CAS(leafKeyAddr(la, i), k, tombstone)
		b.CAS(leafValAddr(la, t.s, i), old, 0)
		if err := t.m.Do(ctx, &b); err != nil {
			return fmt.Errorf("hybrid: delete: %w", err)
		}
		if prev, _ := b.Result(0); prev != k {
			// Another delete won; whichever of us swapped the value out retires it.
			if prev, _ := b.Result(1); prev == old {
				t.retire(ctx, old)
			}
			return ErrNotFound
		}
		for prev, _ := b.Result(1); prev != old; {
			if prev == 0 {
				return nil
			}
			old = prev
			if prev, err = t.m.CAS(ctx, leafValAddr(la, t.s, i), old, 0); err != nil {
				return fmt.Errorf("hybrid: delete: %w", err)
			}
		}
		t.retire(ctx, old)
		return nil
	})
}
