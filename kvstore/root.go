package kvstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
)

// Root layout. See the package doc, "Finding the store".
const (
	// RootOffset is the offset of the store's root word on the allocator's home node: in the
	// gap between the alloc header (alloc.HeaderLen bytes) and the allocator's per-client tables
	// (from alloc.TableOffset), which alloc neither writes nor hands out.
	RootOffset = 2048
	// DescriptorSize is the size of the descriptor block the root word names.
	DescriptorSize = 192
	// Magic is the first word of a descriptor: the bytes "farmKVS1" as a little-endian word.
	Magic uint64 = 0x3153564b6d726166
	// Version is the descriptor layout version this package writes and reads.
	Version = 1
	// MaxReplicas is the most index instances a descriptor records.
	MaxReplicas = 8
	// nameLen is the room for an index kind's or a replicator's name.
	nameLen = 16
	// GenOffset is the offset, on the home node, of the store's generation table: one atomic
	// word per memory node id 1..MaxGenNodes (node n's at GenOffset+8*(n-1)), in the same gap
	// as the root word. A word is a GenWord.
	GenOffset = RootOffset + 64
	// MaxGenNodes is the highest memory node id the generation table has a word for (the
	// table ends before alloc.TableOffset).
	MaxGenNodes = (alloc.TableOffset - GenOffset) / 8
)

// GenWord is a memory node's entry in the store's generation table:
//
//	generation (16 bits) << 48 | low 48 bits of the incarnation it was adopted with
//
// 0 means nothing recorded yet; Open records generation 0 with the incarnation its fabric met
// (a CAS from 0). Store.Adopt bumps the generation with a CAS when it acknowledges a restart,
// recording the incarnation adopted, so that other clients adopting the same restart know it
// was done, and a process that opens the store later fences a node whose incarnation is not
// the recorded one.
type GenWord uint64

// Generation returns the word's generation.
func (w GenWord) Generation() uint64 { return uint64(w) >> 48 }

// Incarnation returns the low 48 bits of the incarnation the generation was adopted with.
func (w GenWord) Incarnation() uint64 { return uint64(w) & (1<<48 - 1) }

func makeGenWord(gen, inc uint64) GenWord { return GenWord(gen<<48 | inc&(1<<48-1)) }

// genAddr returns the address of node's generation word on home, or an error if node has none.
func genAddr(home, node farmem.NodeID) (farmem.Addr, error) {
	if node == 0 || node.IsCompute() || int(node) > MaxGenNodes {
		return 0, fmt.Errorf("kvstore: node %v has no generation word (memory nodes 1..%d): %w", node, MaxGenNodes, farmem.ErrInvalid)
	}
	return farmem.MakeAddr(home, GenOffset+8*uint64(node-1)), nil
}

// Generations reads the generation words of the memory nodes of m's topology from the store's
// home node (one round trip), by node id.
func Generations(ctx context.Context, m farmem.Memory, home farmem.NodeID) (map[farmem.NodeID]GenWord, error) {
	var b farmem.Batch
	var nodes []farmem.NodeID
	var bufs [][]byte
	for _, n := range m.Topology().MemoryNodes() {
		a, err := genAddr(home, n)
		if err != nil {
			continue
		}
		buf := make([]byte, 8)
		b.Read(a, buf)
		nodes, bufs = append(nodes, n), append(bufs, buf)
	}
	out := make(map[farmem.NodeID]GenWord, len(nodes))
	if len(b.Ops) == 0 {
		return out, nil
	}
	if err := m.Do(ctx, &b); err != nil {
		return nil, fmt.Errorf("kvstore: read generation table: %w", err)
	}
	for i, n := range nodes {
		out[n] = GenWord(binary.LittleEndian.Uint64(bufs[i]))
	}
	return out, nil
}

// Root word fields.
const (
	tagShift      = 62
	tagClaim      = 1
	tagReady      = 2
	claimIDShift  = 46
	claimTimeBits = 46
	claimUnit     = 18 // deadlines in units of 2^18 ns (262µs)
	descNodeShift = 42
	descOffBits   = 42
)

// Descriptor offsets.
const (
	dMagic    = 0
	dVersion  = 8
	dIndex    = 16
	dRepl     = 32
	dReplicas = 48
	dCreated  = 56
	dCreator  = 64
	dSync     = 72
	dMeta     = 88 // the metadata replication factor; 0 for 1, so r = 1 descriptors keep their bytes
	dRoots    = 96
	dSum      = DescriptorSize - 8
)

// RootState is what a root word says.
type RootState uint8

// The states of a root word.
const (
	// RootEmpty: no store, and nobody creating one.
	RootEmpty RootState = iota
	// RootClaimed: a client is creating the store, under a lease.
	RootClaimed
	// RootReady: the store exists; the word names its descriptor.
	RootReady
	// RootInvalid: the word is none of the above.
	RootInvalid
)

func (s RootState) String() string {
	switch s {
	case RootEmpty:
		return "empty"
	case RootClaimed:
		return "claimed"
	case RootReady:
		return "ready"
	}
	return "invalid"
}

// RootWord is the store's root word, an atomic word at RootOffset of the home node:
//
//	0                                    no store
//	01 | client id (16) | deadline (46)  claimed: that client is creating the store until the
//	                                     deadline (fabric time in units of 2^18 ns)
//	10 | 0 (5) | node (15) | offset/64 (42)  ready: the descriptor's address
//
// (the two top bits are the tag).
type RootWord uint64

// State returns what the word says.
func (w RootWord) State() RootState {
	switch {
	case w == 0:
		return RootEmpty
	case w>>tagShift == tagClaim:
		return RootClaimed
	case w>>tagShift == tagReady && w>>(descNodeShift+15)&(1<<(tagShift-descNodeShift-15)-1) == 0 && w.Descriptor().Node() != 0:
		return RootReady
	}
	return RootInvalid
}

// Claimant returns the client creating the store (RootClaimed).
func (w RootWord) Claimant() farmem.ClientID { return farmem.ClientID(w >> claimIDShift & 0xffff) }

// Deadline returns the end of the creator's lease (RootClaimed), rounded up to 2^18 ns.
func (w RootWord) Deadline() farmem.Time {
	return farmem.Time(uint64(w)&(1<<claimTimeBits-1)) << claimUnit
}

// Descriptor returns the descriptor's address (RootReady).
func (w RootWord) Descriptor() farmem.Addr {
	node := farmem.NodeID(w >> descNodeShift & 0x7fff)
	return farmem.MakeAddr(node, uint64(w)&(1<<descOffBits-1)<<6)
}

func (w RootWord) String() string {
	switch w.State() {
	case RootEmpty:
		return "empty"
	case RootClaimed:
		return fmt.Sprintf("claimed by client %d until %d", w.Claimant(), w.Deadline())
	case RootReady:
		return "ready at " + w.Descriptor().String()
	}
	return fmt.Sprintf("invalid %#x", uint64(w))
}

// claimWord returns the claim of client id with a lease until deadline.
func claimWord(id farmem.ClientID, deadline farmem.Time) RootWord {
	d := (uint64(deadline) + 1<<claimUnit - 1) >> claimUnit
	return RootWord(tagClaim<<tagShift | uint64(id)<<claimIDShift | d&(1<<claimTimeBits-1))
}

// readyWord returns the word naming the descriptor at a.
func readyWord(a farmem.Addr) (RootWord, error) {
	if a.Node().IsCompute() || a.Node() == 0 || a.Offset()%64 != 0 || a.Offset()>>6 >= 1<<descOffBits {
		return 0, fmt.Errorf("kvstore: descriptor address %v cannot be packed: %w", a, farmem.ErrInvalid)
	}
	return RootWord(tagReady<<tagShift | uint64(a.Node())<<descNodeShift | a.Offset()>>6), nil
}

// Descriptor describes a store: what its root word names. It is written once, by the store's
// creator, before the root word is set to name it, and never changed.
type Descriptor struct {
	// Version is the layout version.
	Version uint64
	// Index is the index kind's name, Replication the replicator's, and Sync the pointer
	// synchronizer's (every client of the store uses it: synchronizers that keep lock entries
	// in the index do not share them).
	Index, Replication, Sync string
	// Roots are the index instances' roots, one per replica.
	Roots []farmem.Addr
	// Created is the fabric time the store was created, Creator the client that created it.
	Created farmem.Time
	Creator farmem.ClientID
	// Replicas is the store's replication factor r: its root word, descriptor and generation
	// table are on the allocator's r metadata nodes (alloc.MetaNodes), kept on a majority.
	// 0 (what a store created before replication reads as) and 1 both mean one copy, on the
	// home node.
	Replicas int
}

// replicas is d's replication factor, 1 for 0.
func (d Descriptor) replicas() int { return max(1, d.Replicas) }

// Encode returns the DescriptorSize bytes of d as stored at address at (the checksum covers the
// address, so a descriptor copied elsewhere does not validate).
func (d Descriptor) Encode(at farmem.Addr) ([]byte, error) {
	for _, n := range []string{d.Index, d.Replication, d.Sync} {
		if len(n) == 0 || len(n) > nameLen {
			return nil, fmt.Errorf("kvstore: name %q not 1..%d bytes: %w", n, nameLen, farmem.ErrInvalid)
		}
	}
	if len(d.Roots) == 0 || len(d.Roots) > MaxReplicas {
		return nil, fmt.Errorf("kvstore: %d index roots, want 1..%d: %w", len(d.Roots), MaxReplicas, farmem.ErrInvalid)
	}
	b := make([]byte, DescriptorSize)
	le := binary.LittleEndian
	le.PutUint64(b[dMagic:], Magic)
	le.PutUint64(b[dVersion:], Version)
	copy(b[dIndex:dIndex+nameLen], d.Index)
	copy(b[dRepl:dRepl+nameLen], d.Replication)
	copy(b[dSync:dSync+nameLen], d.Sync)
	le.PutUint64(b[dReplicas:], uint64(len(d.Roots)))
	le.PutUint64(b[dCreated:], uint64(d.Created))
	le.PutUint64(b[dCreator:], uint64(d.Creator))
	if d.Replicas < 0 || d.Replicas > alloc.MaxMetaReplicas {
		return nil, fmt.Errorf("kvstore: replication factor %d: %w", d.Replicas, farmem.ErrInvalid)
	}
	if d.Replicas > 1 {
		le.PutUint64(b[dMeta:], uint64(d.Replicas))
	}
	for i, r := range d.Roots {
		if r == 0 {
			return nil, fmt.Errorf("kvstore: nil index root %d: %w", i, farmem.ErrInvalid)
		}
		le.PutUint64(b[dRoots+8*i:], uint64(r))
	}
	le.PutUint64(b[dSum:], descSum(at, b[:dSum]))
	return b, nil
}

func descSum(at farmem.Addr, b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	var a [8]byte
	binary.LittleEndian.PutUint64(a[:], uint64(at))
	_, _ = h.Write(a[:])
	return h.Sum64()
}

// DecodeDescriptor decodes and validates the descriptor read at address at. It never panics;
// bytes that are not a descriptor this package wrote there give an error wrapping ErrBadRoot.
func DecodeDescriptor(at farmem.Addr, b []byte) (Descriptor, error) {
	bad := func(why string, args ...any) (Descriptor, error) {
		return Descriptor{}, fmt.Errorf("kvstore: descriptor at %v: %s: %w", at, fmt.Sprintf(why, args...), ErrBadRoot)
	}
	if len(b) < DescriptorSize {
		return bad("%d bytes, want %d", len(b), DescriptorSize)
	}
	b = b[:DescriptorSize]
	le := binary.LittleEndian
	if m := le.Uint64(b[dMagic:]); m != Magic {
		return bad("magic %#x", m)
	}
	if s := le.Uint64(b[dSum:]); s != descSum(at, b[:dSum]) {
		return bad("checksum %#x does not match", s)
	}
	d := Descriptor{Version: le.Uint64(b[dVersion:])}
	if d.Version != Version {
		return bad("layout version %d, this package reads %d", d.Version, Version)
	}
	name := func(off int) (string, bool) {
		f := b[off : off+nameLen]
		n := bytes.IndexByte(f, 0)
		if n < 0 {
			n = nameLen
		}
		for _, c := range f[n:] {
			if c != 0 {
				return "", false
			}
		}
		return string(f[:n]), n > 0
	}
	var ok1, ok2, ok3 bool
	d.Index, ok1 = name(dIndex)
	d.Replication, ok2 = name(dRepl)
	d.Sync, ok3 = name(dSync)
	if !ok1 || !ok2 || !ok3 {
		return bad("bad index, replication or synchronizer name")
	}
	n := le.Uint64(b[dReplicas:])
	if n == 0 || n > MaxReplicas {
		return bad("%d replicas", n)
	}
	d.Created = farmem.Time(le.Uint64(b[dCreated:]))
	c := le.Uint64(b[dCreator:])
	if c > 0xffff {
		return bad("creator %d", c)
	}
	d.Creator = farmem.ClientID(c)
	if r := le.Uint64(b[dMeta:]); r > alloc.MaxMetaReplicas || r == 1 || r > 1 && r%2 == 0 {
		return bad("replication factor %d", r)
	} else {
		d.Replicas = int(r)
	}
	for i := range uint64(MaxReplicas) {
		r := farmem.Addr(le.Uint64(b[dRoots+8*i:]))
		switch {
		case i < n && r == 0:
			return bad("nil root %d", i)
		case i >= n && r != 0:
			return bad("root %d beyond %d replicas", i, n)
		case i < n:
			d.Roots = append(d.Roots, r)
		}
	}
	if !allZero(b[dCreator+8:dSync]) || !allZero(b[dSync+nameLen:dMeta]) || !allZero(b[dRoots+8*MaxReplicas:dSum]) {
		return bad("reserved bytes are not zero")
	}
	return d, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Info is what Inspect finds on a fabric.
type Info struct {
	// Home is the allocator's home node, and Root the root word's address on it.
	Home farmem.NodeID
	Root farmem.Addr
	// Word is the root word read.
	Word RootWord
	// Descriptor is the store's descriptor (when Word is ready).
	Descriptor Descriptor
}

// Inspect finds the store on m's fabric without opening it: it reads the lowest memory node's
// allocator header for the home node, the root word there and, if the store is ready, its
// descriptor. Nothing is written. A fabric whose nodes are not formatted gives an error
// wrapping ErrNoStore and the allocator's error; a root word that says "empty" or "claimed"
// is returned as found, with no error.
func Inspect(ctx context.Context, m farmem.Memory) (Info, error) {
	hh, err := homeHeader(ctx, m)
	if err != nil {
		return Info{}, err
	}
	home := hh.Home
	info := Info{Home: home, Root: farmem.MakeAddr(home, RootOffset)}
	if hh.Replicas > 1 {
		// Replicated: the root word a majority of the metadata nodes holds.
		nodes := alloc.MetaNodes(m.Topology(), hh)
		w, got, err := readWords(ctx, m, nodes, len(nodes)/2+1, RootOffset)
		if err != nil {
			return info, fmt.Errorf("kvstore: read root words: %w", err)
		}
		v, ok := decided(w, got, len(nodes)/2+1)
		if !ok {
			return info, fmt.Errorf("kvstore: the root words of %v disagree (a creation or restore in progress): %w", nodes, farmem.ErrNodeDown)
		}
		info.Word = RootWord(v)
		if info.Word.State() == RootReady {
			info.Descriptor, err = readDescriptorRep(ctx, m, nodes, w, v)
		}
		return info, err
	}
	var w [8]byte
	if err := m.Read(ctx, info.Root, w[:]); err != nil {
		return info, fmt.Errorf("kvstore: read root word: %w", err)
	}
	info.Word = RootWord(binary.LittleEndian.Uint64(w[:]))
	switch info.Word.State() {
	case RootReady:
		info.Descriptor, err = readDescriptor(ctx, m, info.Word.Descriptor())
		return info, err
	case RootInvalid:
		return info, fmt.Errorf("kvstore: root word at %v is %#x: %w", info.Root, uint64(info.Word), ErrBadRoot)
	}
	return info, nil
}

func readDescriptor(ctx context.Context, m farmem.Memory, a farmem.Addr) (Descriptor, error) {
	b := make([]byte, DescriptorSize)
	if err := m.Read(ctx, a, b); err != nil {
		return Descriptor{}, fmt.Errorf("kvstore: read descriptor: %w", err)
	}
	return DecodeDescriptor(a, b)
}

// creator builds the store's index instances and descriptor, for findOrCreate.
type creator func(ctx context.Context) (Descriptor, farmem.Addr, error)

// findOrCreate returns the store's descriptor, creating the store with create if the root word
// is empty (or its claimant's lease has run out) and create is not nil. Racing creators are
// resolved by CAS on the root word: one claims it, the others wait for it to become ready, and
// take the claim over if the claimant's lease runs out (what it had built is leaked).
func findOrCreate(ctx context.Context, m farmem.Memory, root farmem.Addr, lease, skew time.Duration, create creator) (Descriptor, error) {
	rt := m.Runtime()
	backoff := 2 * time.Microsecond
	var buf [8]byte
	for {
		if err := m.Read(ctx, root, buf[:]); err != nil {
			return Descriptor{}, fmt.Errorf("kvstore: read root word: %w", err)
		}
		w := RootWord(binary.LittleEndian.Uint64(buf[:]))
		switch w.State() {
		case RootReady:
			return readDescriptor(ctx, m, w.Descriptor())
		case RootInvalid:
			return Descriptor{}, fmt.Errorf("kvstore: root word at %v is %#x: %w", root, uint64(w), ErrBadRoot)
		}
		free := w.State() == RootEmpty || after(rt.Now(), w.Deadline().Add(skew))
		if free && create == nil {
			return Descriptor{}, fmt.Errorf("%w (root word %v)", ErrNoStore, w)
		}
		if free {
			claim := claimWord(m.Info().ID, rt.Now().Add(lease))
			prev, err := m.CAS(ctx, root, uint64(w), uint64(claim))
			if err != nil {
				return Descriptor{}, fmt.Errorf("kvstore: claim root word: %w", err)
			}
			if RootWord(prev) == w {
				d, da, err := create(ctx)
				if err != nil {
					// Give the claim back so that others need not wait for the lease.
					_, _ = m.CAS(ctx, root, uint64(claim), 0)
					return Descriptor{}, err
				}
				ready, err := readyWord(da)
				if err != nil {
					return Descriptor{}, err
				}
				prev, err := m.CAS(ctx, root, uint64(claim), uint64(ready))
				if err != nil {
					return Descriptor{}, fmt.Errorf("kvstore: publish root word: %w", err)
				}
				if RootWord(prev) == claim {
					return d, nil
				}
				// Our lease ran out and another client took the claim over: what we built is
				// leaked, and the store is theirs.
			}
			continue
		}
		if err := rt.Sleep(ctx, backoff); err != nil {
			return Descriptor{}, err
		}
		backoff = min(2*backoff, time.Millisecond)
	}
}

// after reports whether t is after u.
func after(t, u farmem.Time) bool { return u < t }
