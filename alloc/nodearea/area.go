package nodearea

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// ErrNoSpace is farmem.ErrNoSpace: errors of an exhausted area wrap it.
var ErrNoSpace = farmem.ErrNoSpace

const (
	// Version is the layout version recorded in the magic word.
	Version = 1
	// Granule is the smallest block and the unit of every class size and block offset.
	Granule = 16
	// HeaderSize is the size of the fixed part of the header, before the free-list heads.
	HeaderSize = 64

	magic    = uint64(0x4e4f44454152)<<16 | Version // "NODEAR", version
	offMagic = 0
	offBump  = 8
	idxBits  = 40
	idxMask  = 1<<idxBits - 1
	tagOne   = uint64(1) << idxBits
)

// Area is one client's handle on its compute node's shared area. It holds only constants (the
// area's bounds and classes) and a scratch buffer, so it belongs to one goroutine like the
// client it was opened with; every client of the node opens its own and they share the state,
// which lives in the area's words.
type Area struct {
	m       farmem.Memory
	base    farmem.Addr // SharedBase of the client's compute node
	size    uint64      // bytes of the area
	data    uint64      // offset of the data start from base
	classes []uint64
	buf     [8]byte
}

// Open returns a handle on m's compute node's shared area, formatting it if nobody has (see
// the package doc: formatting is one CAS and race-free). It fails with farmem.ErrInvalid if the
// area is too small to hold its header and one block, or holds another format, and with the
// error of the verb that failed otherwise.
func Open(ctx context.Context, m farmem.Memory) (*Area, error) {
	t := m.Topology()
	node := m.Info().Node
	info, ok := t.Node(node)
	if !ok || info.Role != farmem.RoleCompute {
		return nil, fmt.Errorf("nodearea: %v is not a compute node: %w", node, farmem.ErrInvalid)
	}
	sb := t.SharedBase()
	if info.Size <= sb {
		return nil, fmt.Errorf("nodearea: %v has no shared area: %w", node, farmem.ErrInvalid)
	}
	a := &Area{m: m, base: farmem.MakeAddr(node, sb), size: (info.Size - sb) &^ (Granule - 1)}
	a.classes = classesFor(a.size)
	a.data = alignUp(HeaderSize+8*uint64(len(a.classes)), 64)
	if a.data+Granule > a.size || len(a.classes) == 0 {
		return nil, fmt.Errorf("nodearea: %v: shared area of %d bytes cannot hold the allocator's header: %w", node, a.size, farmem.ErrInvalid)
	}
	if a.size>>4 > idxMask {
		return nil, fmt.Errorf("nodearea: %v: shared area of %d bytes is past 16 TiB: %w", node, a.size, farmem.ErrInvalid)
	}
	w, err := a.load(ctx, offMagic)
	if err != nil {
		return nil, err
	}
	if w == 0 {
		if w, err = a.m.CAS(ctx, a.base, 0, magic); err != nil {
			return nil, fmt.Errorf("nodearea: %v: format: %w", node, err)
		}
		if w == 0 {
			w = magic
		}
	}
	if w != magic {
		return nil, fmt.Errorf("nodearea: %v: shared area holds magic word %#x, not this layout's %#x: %w", node, w, magic, farmem.ErrInvalid)
	}
	return a, nil
}

// Base returns the address of the area (its header).
func (a *Area) Base() farmem.Addr { return a.base }

// Size returns the area's size in bytes, header included.
func (a *Area) Size() uint64 { return a.size }

// MaxBlock returns the largest size Alloc can serve.
func (a *Area) MaxBlock() uint64 { return a.classes[len(a.classes)-1] }

// ClassSize returns the size of the block Alloc hands out for a request of size bytes, or 0
// if no class holds it.
func (a *Area) ClassSize(size uint64) uint64 {
	c := classOf(a.classes, size)
	if c < 0 {
		return 0
	}
	return a.classes[c]
}

// InUse returns the bytes the bump has handed out (blocks in use and blocks on free lists
// together), read with one verb.
func (a *Area) InUse(ctx context.Context) (uint64, error) { return a.load(ctx, offBump) }

// Alloc returns a block of at least size bytes in the area, with unspecified contents (zero if
// it was never used). Costs: see the package doc. It fails with an error wrapping
// farmem.ErrNoSpace when the class's free list is empty and the bump cannot fit the block, or
// the size exceeds MaxBlock; with farmem.ErrInvalid for size 0.
func (a *Area) Alloc(ctx context.Context, size uint64) (farmem.Addr, error) {
	b, _, err := a.alloc(ctx, size)
	return b, err
}

// AllocZeroed is Alloc with the block's bytes zeroed: a reused block costs one more write
// (of the class size), a never-used one nothing more.
func (a *Area) AllocZeroed(ctx context.Context, size uint64) (farmem.Addr, error) {
	b, reused, err := a.alloc(ctx, size)
	if err != nil || !reused {
		return b, err
	}
	if err := a.m.Write(ctx, b, make([]byte, a.classes[classOf(a.classes, size)])); err != nil {
		// The block is allocated but not zeroed: give it back rather than leak it.
		_ = a.Free(ctx, b, size)
		return 0, fmt.Errorf("nodearea: zero a block: %w", err)
	}
	return b, nil
}

func (a *Area) alloc(ctx context.Context, size uint64) (farmem.Addr, bool, error) {
	if size == 0 {
		return 0, false, fmt.Errorf("nodearea: allocate 0 bytes: %w", farmem.ErrInvalid)
	}
	c := classOf(a.classes, size)
	if c < 0 {
		return 0, false, fmt.Errorf("nodearea: %v: %d bytes exceed the largest block, %d: %w", a.base.Node(), size, a.MaxBlock(), ErrNoSpace)
	}
	cs := a.classes[c]
	head := a.headOff(c)
	// Pop the class's free list.
	h, err := a.load(ctx, head)
	if err != nil {
		return 0, false, err
	}
	for h&idxMask != 0 {
		blk := (h & idxMask) * Granule
		next, err := a.load(ctx, blk)
		if err != nil {
			return 0, false, err
		}
		nh := (h&^idxMask + tagOne) | next&idxMask
		prev, err := a.m.CAS(ctx, a.base.Add(head), h, nh)
		if err != nil {
			return 0, false, fmt.Errorf("nodearea: pop: %w", err)
		}
		if prev == h {
			b := a.base.Add(blk)
			forgetAtomic(a.m, b, cs)
			return b, true, nil
		}
		h = prev
	}
	// Bump.
	al := blockAlign(cs)
	used, err := a.load(ctx, offBump)
	if err != nil {
		return 0, false, err
	}
	for {
		start := alignUp(a.data+used, al)
		end := start + cs
		if end > a.size || end < start {
			return 0, false, fmt.Errorf("nodearea: %v: shared area exhausted: a %d-byte block does not fit (%d of %d bytes handed out, the class's free list is empty): %w",
				a.base.Node(), cs, a.data+used, a.size, ErrNoSpace)
		}
		prev, err := a.m.CAS(ctx, a.base.Add(offBump), used, end-a.data)
		if err != nil {
			return 0, false, fmt.Errorf("nodearea: bump: %w", err)
		}
		if prev == used {
			return a.base.Add(start), false, nil
		}
		used = prev
	}
}

// Free returns block b, allocated from this area with size bytes (or any size of the same
// class), to its class's free list. It fails with farmem.ErrInvalid for an address that cannot
// be a block of this area (another node, outside the area's data, misaligned for its class).
// Freeing a block twice, or one still in use, corrupts the area: the package cannot detect it.
func (a *Area) Free(ctx context.Context, b farmem.Addr, size uint64) error {
	c := classOf(a.classes, size)
	if size == 0 || c < 0 {
		return fmt.Errorf("nodearea: free %v: size %d is no class of this area: %w", b, size, farmem.ErrInvalid)
	}
	cs := a.classes[c]
	if b.Node() != a.base.Node() || b.Offset() < a.base.Offset()+a.data || b.Offset()+cs > a.base.Offset()+a.size {
		return fmt.Errorf("nodearea: free %v: not a block of %v's shared area: %w", b, a.base.Node(), farmem.ErrInvalid)
	}
	off := b.Offset() - a.base.Offset()
	if off%blockAlign(cs) != 0 {
		return fmt.Errorf("nodearea: free %v: misaligned for a %d-byte block: %w", b, cs, farmem.ErrInvalid)
	}
	head := a.headOff(c)
	h, err := a.load(ctx, head)
	if err != nil {
		return err
	}
	forgetAtomic(a.m, b, cs)
	for {
		binary.LittleEndian.PutUint64(a.buf[:], h&idxMask)
		if err := a.m.Write(ctx, b, a.buf[:]); err != nil {
			return fmt.Errorf("nodearea: push: %w", err)
		}
		nh := (h&^idxMask + tagOne) | off/Granule
		prev, err := a.m.CAS(ctx, a.base.Add(head), h, nh)
		if err != nil {
			return fmt.Errorf("nodearea: push: %w", err)
		}
		if prev == h {
			return nil
		}
		h = prev
	}
}

// headOff returns the offset of class c's free-list head.
func (a *Area) headOff(c int) uint64 { return HeaderSize + 8*uint64(c) }

// load reads the word at offset off of the area.
func (a *Area) load(ctx context.Context, off uint64) (uint64, error) {
	if err := a.m.Read(ctx, a.base.Add(off), a.buf[:]); err != nil {
		return 0, fmt.Errorf("nodearea: read %v: %w", a.base.Add(off), err)
	}
	return binary.LittleEndian.Uint64(a.buf[:]), nil
}

// classesFor returns the size classes of an area of size bytes: every multiple of Granule up
// to 256, then eight per doubling, up to the largest that fits the area.
func classesFor(size uint64) []uint64 {
	var cs []uint64
	for c := uint64(Granule); c <= 256 && c <= size; c += Granule {
		cs = append(cs, c)
	}
	for p := uint64(256); p < size; p *= 2 {
		step := p / 8
		for c := p + step; c <= 2*p && c <= size; c += step {
			cs = append(cs, c)
		}
	}
	return cs
}

// classOf returns the smallest class holding size bytes, or -1.
func classOf(classes []uint64, size uint64) int {
	lo, hi := 0, len(classes)
	for lo < hi {
		mid := (lo + hi) / 2
		if classes[mid] >= size {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo == len(classes) {
		return -1
	}
	return lo
}

// blockAlign returns the alignment of a class's blocks: the largest power of two dividing its
// size, at most 64.
func blockAlign(cs uint64) uint64 {
	al := cs & -cs
	return min(al, 64)
}

func alignUp(x, al uint64) uint64 { return (x + al - 1) &^ (al - 1) }

// forgetAtomic tells a transport with a strict mode (farmem/local) that the words of a block
// being recycled are plain data again, so the link written into a freed block, and the user's
// writes into a reused one, are no violation; other transports have no such method.
func forgetAtomic(m farmem.Memory, a farmem.Addr, n uint64) {
	if s, ok := m.(interface{ ForgetAtomic(a farmem.Addr, n uint64) }); ok {
		s.ForgetAtomic(a, n)
	}
}
