package race

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// This file is what an index proxy (FlexKV, in kvstore) and an address cache need from the
// table: partitions, a slot-resolved lookup, reads of blocks named by words someone else
// found, and address-cache reads. See the package doc, "Proxying and address caches".

// ErrBusy: a partition cannot be handed over now (a split holds one of its subtables, or the
// directory lags behind a split); try again later.
var ErrBusy = errors.New("race: partition busy")

// Layout is a table's shape, fixed at creation: immutable, so it may be shared by goroutines.
type Layout struct {
	p   Params
	geo geometry
}

// Layout returns the table's shape.
func (t *Table) Layout() *Layout { return &Layout{p: t.p, geo: t.geo} }

// Partitions is the number of partitions: 2^InitialDepth, the subtables at creation. A
// partition is every subtable descended from one of them (its suffix's low InitialDepth bits).
func (l *Layout) Partitions() int { return 1 << l.p.InitialDepth }

// PartitionOf returns key's partition.
func (l *Layout) PartitionOf(key []byte) int {
	return int(hashKey(l.p.Seed, key).h1 & uint64(l.Partitions()-1))
}

// Slots is the number of slots of a subtable.
func (l *Layout) Slots() int { return int(l.geo.nslots) }

// SlotAddr returns the address of slot i of subtable st.
func (l *Layout) SlotAddr(st farmem.Addr, i uint64) farmem.Addr { return l.geo.slotAddr(st, i) }

// KeyPlace is where a key's slots are in whichever subtable holds it.
type KeyPlace struct {
	// H1 chooses the subtable (Covers).
	H1 uint64
	// FP is the key's fingerprint.
	FP uint8
	// Candidates are the slot indices of its two combined buckets, ascending, no repeats.
	Candidates []uint64
}

// Place returns key's place.
func (l *Layout) Place(key []byte) KeyPlace {
	var op opState
	initOp(&l.p, &l.geo, &op, key)
	pl := KeyPlace{H1: op.k.h1, FP: op.fp}
	n := 2 * l.geo.perB
	for r, start := range op.ranges {
		if r == 1 && op.same {
			break
		}
		for i := start; i < start+n; i++ {
			if !slices.Contains(pl.Candidates, i) {
				pl.Candidates = append(pl.Candidates, i)
			}
		}
	}
	slices.Sort(pl.Candidates)
	return pl
}

// Covers reports whether a subtable with header word h holds the keys whose H1 is h1.
func (l *Layout) Covers(h, h1 uint64) bool { return covers(h, h1) }

// CoversHeader reports whether a subtable with header word h holds the keys whose H1 is h1,
// when no split of it is in progress (as in the subtables ReadPartition returns: it refuses a
// partition in which a split moved region by region has begun and not ended, since the new
// half then holds some of the keys the header covers).
func CoversHeader(h, h1 uint64) bool { return covers(h, h1) }

// SlotsOffset is the offset of a subtable's slot array.
func SlotsOffset() uint64 { return stSlotsOff }

// Subtable is a subtable's image as ReadPartition read it.
type Subtable struct {
	Addr   farmem.Addr
	Header uint64
	Words  []Slot
}

// ReadPartition reads, with client m, the current directory of the table at root and every
// subtable of partition p (3 round trips: the root, the directory, the subtables). It needs
// no handle or allocator; call it on a quiet partition (a directory replaced by a doubling
// meanwhile may have been reused: the headers then fail to cover, and it fails with ErrBusy).
// It fails with ErrBusy if a subtable is
// splitting (its lock held, or, in a layout version 4 table, a split moved region by region
// begun and not ended: such a split advances only as clients insert, and Table.FinishSplits
// ends it, FinishPartitionSplits for one partition) or left frozen, or the
// directory names an ancestor of a subtable: a quiet partition has none of these, and the
// caller retries.
func ReadPartition(ctx context.Context, m farmem.Memory, root farmem.Addr, p int) ([]Subtable, error) {
	rb := make([]byte, RootSize)
	if err := m.Read(ctx, root, rb); err != nil {
		return nil, fmt.Errorf("race: read root: %w", err)
	}
	r, err := DecodeRoot(rb)
	if err != nil {
		return nil, err
	}
	geo := newGeometry(uint64(r.Params.Groups), uint64(r.Params.SlotsPerBucket), uint64(r.Params.MetaSize))
	P := uint64(1) << r.Params.InitialDepth
	if p < 0 || uint64(p) >= P {
		return nil, fmt.Errorf("race: partition %d of %d: %w", p, P, farmem.ErrInvalid)
	}
	db := make([]byte, 8<<r.GlobalDepth)
	if err := m.Read(ctx, r.Dir, db); err != nil {
		return nil, fmt.Errorf("race: read directory: %w", err)
	}
	le := binary.LittleEndian
	var sts []farmem.Addr
	var suffixes [][]uint64
	for i := uint64(0); i < uint64(len(db)/8); i++ {
		if i&(P-1) != uint64(p) {
			continue
		}
		a := unpackAddr(le.Uint64(db[8*i:]))
		k := slices.Index(sts, a)
		if k < 0 {
			sts = append(sts, a)
			suffixes = append(suffixes, nil)
			k = len(sts) - 1
		}
		suffixes[k] = append(suffixes[k], i)
	}
	var b farmem.Batch
	bufs := make([][]byte, len(sts))
	// A table split region by region needs the whole header area (the move word says whether
	// a split is in progress); the others, the header and lock words, as they always read.
	hl := uint64(16)
	if r.Version > wholeSplitVersion {
		hl = headerAreaLen
	}
	for k, st := range sts {
		bufs[k] = make([]byte, hl+8*geo.nslots)
		b.Read(st.Add(stHeaderOff), bufs[k][:hl])
		b.Read(geo.slotAddr(st, 0), bufs[k][hl:])
	}
	if err := doChunked(ctx, m, &b); err != nil {
		return nil, fmt.Errorf("race: read partition %d: %w", p, err)
	}
	out := make([]Subtable, len(sts))
	for k, st := range sts {
		s := Subtable{Addr: st, Header: le.Uint64(bufs[k][0:]), Words: make([]Slot, geo.nslots)}
		var hs subtableState
		if hl == headerAreaLen {
			hs.decodeHeader(bufs[k][:hl])
		} else {
			hs.hdr, hs.lock = le.Uint64(bufs[k][stHeaderOff:]), le.Uint64(bufs[k][stLockOff:])
		}
		if hs.lock != 0 || hs.splitting() {
			// Held by a split's step, or (layout version 4) a split moved region by region is
			// in progress: some of the subtable's keys are in its new half, which no
			// directory entry names yet.
			return nil, fmt.Errorf("race: partition %d: subtable %v is splitting: %w", p, st, ErrBusy)
		}
		for _, i := range suffixes[k] {
			if !covers(s.Header, i) {
				return nil, fmt.Errorf("race: partition %d: the directory lags behind a split of %v: %w", p, st, ErrBusy)
			}
		}
		for i := range s.Words {
			s.Words[i] = Slot(le.Uint64(bufs[k][hl+8*uint64(i):]))
			if s.Words[i].Frozen() {
				return nil, fmt.Errorf("race: partition %d: subtable %v has frozen slots: %w", p, st, ErrBusy)
			}
		}
		out[k] = s
	}
	return out, nil
}

// DeleteWord returns the word a Delete by this handle installs now: 0, or a tombstone under
// Options.DeleteLease.
func (t *Table) DeleteWord() Slot { return t.deleteWord() }

// Reusable reports whether an Insert may take a slot holding w now: empty, or a tombstone
// whose lease has run out (plus ClockSkew), and not frozen.
func (t *Table) Reusable(w Slot) bool { return t.free(w, t.rt.Now()) }

// Resolution is a slot-resolved lookup of a key on the memory nodes' copy of the index.
type Resolution struct {
	// Subtable and Header are the subtable covering the key and its header word.
	Subtable farmem.Addr
	Header   uint64
	// Index and Words are the key's candidate slots and their words as read.
	Index []uint64
	Words []Slot
	// Key is the position in Index of the committed slot holding the key, or -1.
	Key int
	// FP is the key's fingerprint.
	FP uint8
	// New is the committed word of the KV block Resolve wrote (0 if it wrote none).
	New Slot
}

// Resolve locates key's slot on the memory nodes: its candidate buckets and the blocks of
// their committed fingerprint matches, as an Update's first two round trips do (the second is
// skipped when no slot has the key's fingerprint). With a non-nil value it also writes a new
// KV block of key and value in the first round trip (Resolution.New; the caller publishes it,
// or frees it with FreeBlock). Blocks are read pinned; the words are the caller's to use as
// expected values (a proxy's commit), whose ABA safety is the caller's: see the package doc.
func (t *Table) Resolve(ctx context.Context, key, value []byte) (Resolution, error) {
	if err := t.usable(); err != nil {
		return Resolution{}, err
	}
	if value != nil {
		if err := checkKV(key, value); err != nil {
			return Resolution{}, err
		}
	}
	op := t.newOp(key)
	if err := t.pin(ctx); err != nil {
		return Resolution{}, err
	}
	defer t.unpin()
	var nb *newBlock
	if value != nil {
		var err error
		if nb, err = t.makeBlock(ctx, op, value, 0); err != nil {
			return Resolution{}, err
		}
	}
	pre := nb
	for range maxAttempts {
		v, err := t.locate(ctx, op, pre)
		if err != nil {
			t.dropBlock(ctx, nb)
			return Resolution{}, err
		}
		pre = nil
		j, err := t.findKey(ctx, op, &v, false)
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			t.dropBlock(ctx, nb)
			return Resolution{}, err
		}
		r := Resolution{Subtable: v.st, Header: v.hdr, Index: slices.Clone(v.idx), Words: slices.Clone(v.words), Key: j, FP: op.fp}
		if nb != nil {
			r.New = nb.slot
		}
		return r, nil
	}
	t.dropBlock(ctx, nb)
	return Resolution{}, fmt.Errorf("race: resolve: blocks keep failing validation: %w", ErrCorrupt)
}

// Others returns the committed words of r with the key's fingerprint other than the key's
// (blocks of other keys): a proxy checks that its copy holds exactly these before an insert
// commits, so that no slot of the key appeared since the client resolved it.
func (r *Resolution) Others() []Slot {
	var out []Slot
	for j, w := range r.Words {
		if j != r.Key && w.Committed() && w.Fingerprint() == r.FP {
			out = append(out, w)
		}
	}
	return out
}

// WriteBlock allocates and writes a new KV block of key and value (and its copies), one round
// trip, and returns its committed word: a write whose slot the caller already knows (a
// cached slot address) publishes it, or frees it with FreeBlock.
func (t *Table) WriteBlock(ctx context.Context, key, value []byte) (Slot, error) {
	if err := t.usable(); err != nil {
		return 0, err
	}
	if err := checkKV(key, value); err != nil {
		return 0, err
	}
	op := t.newOp(key)
	nb, err := t.makeBlock(ctx, op, value, 0)
	if err != nil {
		return 0, err
	}
	var b farmem.Batch
	addBlockWrites(&b, nb)
	if err := t.m.Do(ctx, &b); err != nil {
		t.lost()
		return 0, fmt.Errorf("race: write KV block: %w", err)
	}
	return nb.slot, nil
}

// FreeBlock frees a block Resolve wrote that no slot ever held.
func (t *Table) FreeBlock(w Slot) error {
	if w.Empty() {
		return nil
	}
	return t.freeBlockAt(w.Addr(), w.Size())
}

// Retire hands back the block of a committed word that a commit replaced (deferred free).
func (t *Table) Retire(ctx context.Context, w Slot) { t.retire(ctx, w.Plain()) }

// Entry is an address-cache entry: where a key's block was, which block it was (its stamp),
// and the slot that named it.
type Entry struct {
	// Word is the committed slot word (the block's address and length); Stamp the block's.
	Word  Slot
	Stamp uint32
	// Slot is the address of the slot that held Word.
	Slot farmem.Addr
}

// SearchEntry is Search that also returns the address-cache entry of the block it read.
func (t *Table) SearchEntry(ctx context.Context, key []byte) ([]byte, Entry, error) {
	if err := t.usable(); err != nil {
		return nil, Entry{}, err
	}
	t.stats.Searches++
	op := t.newOp(key)
	op.keepValue = true
	for {
		if err := t.pin(ctx); err != nil {
			return nil, Entry{}, err
		}
		var e Entry
		var val []byte
		err := errStale
		for range maxAttempts {
			var v view
			if v, err = t.locate(ctx, op, nil); err != nil {
				break
			}
			var j int
			j, err = t.findKey(ctx, op, &v, false)
			if errors.Is(err, errStale) {
				continue
			}
			if err == nil && j < 0 {
				err = ErrNotFound
			}
			if err == nil {
				w := v.words[j]
				info, _ := op.info(blockKey(w))
				val = info.value
				e = Entry{Word: blockKey(w), Stamp: info.stamp, Slot: t.geo.slotAddr(v.st, v.idx[j])}
			}
			break
		}
		ok := t.unpin()
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, Entry{}, err
		}
		if !ok {
			op.forget()
			continue
		}
		return val, e, err
	}
}

// SearchCached reads key's value through an address-cache entry: one round trip (the slot's
// word, the block's valid word when the slot and the block are on different memory nodes, then
// the block, in one batch). ok is false, with no error, when the entry is stale: the slot no
// longer holds the entry's word, or the block fails validation, holds another key or another
// stamp (it was reused), or its valid word, if read, is set (a writer replaced or is replacing
// it). A value it returns was the key's committed value when the slot's word was read (one
// node: the block is read after it, in order) or when the block's valid word was read (two
// nodes): writers set the valid word before their commit (Options.Invalidate, and a proxy),
// and a block is reused only after it was replaced (see the package doc, "Proxying and address
// caches").
func (t *Table) SearchCached(ctx context.Context, key []byte, e Entry) (val []byte, ok bool, err error) {
	if err := t.usable(); err != nil {
		return nil, false, err
	}
	if !e.Word.Committed() {
		return nil, false, nil
	}
	buf := make([]byte, 16+e.Word.Size())
	var blk Block
	ok, err = t.readCached(ctx, key, e.Word, e.Slot, e.Stamp, buf[:16:16], buf[16:], false, &blk)
	if err != nil || !ok {
		return nil, false, err
	}
	return bytes.Clone(blk.Value), true, nil
}

// SearchWords reads key's value from the blocks of words (committed slot words someone else
// found for key, a proxy's answer, with the addresses of their slots): one round trip. fetch
// is called pinned and returns them, so their blocks cannot be reused before they are read;
// it is called again if a block fails validation. It returns ErrNotFound if no block holds
// key, and the entry of the one that does.
func (t *Table) SearchWords(ctx context.Context, key []byte, fetch func() ([]Slot, []farmem.Addr, error)) ([]byte, Entry, error) {
	if err := t.usable(); err != nil {
		return nil, Entry{}, err
	}
	t.stats.Searches++
	op := t.newOp(key)
	op.keepValue = true
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			return nil, Entry{}, fmt.Errorf("race: blocks keep failing validation: %w", ErrCorrupt)
		}
		if err := t.pin(ctx); err != nil {
			return nil, Entry{}, err
		}
		ws, slots, err := fetch()
		if err != nil {
			t.unpin()
			return nil, Entry{}, err
		}
		v := view{words: ws, idx: make([]uint64, len(ws))}
		js := make([]int, 0, len(ws))
		for j, w := range ws {
			if w.Committed() {
				js = append(js, j)
			}
		}
		err = t.learn(ctx, op, &v, js, false)
		ok := t.unpin()
		if errors.Is(err, errStale) || err == nil && !ok {
			op.forget()
			continue
		}
		if err != nil {
			return nil, Entry{}, err
		}
		for _, j := range js {
			if info, _ := op.info(blockKey(ws[j])); info.isKey {
				e := Entry{Word: blockKey(ws[j]), Stamp: info.stamp}
				if j < len(slots) {
					e.Slot = slots[j]
				}
				return info.value, e, nil
			}
		}
		return nil, Entry{}, ErrNotFound
	}
}
