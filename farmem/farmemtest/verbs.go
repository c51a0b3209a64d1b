package farmemtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// base is where tests put their data on a memory node: clear of the node header.
const base = 64 << 10

func testTopology(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	for _, n := range e.tp.Nodes {
		require.Equal(t, n.ID.IsCompute(), n.Role == farmem.RoleCompute, "node %v", n.ID)
		require.NotZero(t, n.Size)
	}
	got, ok := e.tp.Node(e.tp.MemoryNodes()[0])
	require.True(t, ok)
	require.Equal(t, farmem.RoleMemory, got.Role)
	seen := map[farmem.ClientID]bool{}
	for i := range 6 {
		m := e.client(i)
		info := m.Info()
		require.NotZero(t, info.ID)
		require.False(t, seen[info.ID], "client id %d given twice", info.ID)
		seen[info.ID] = true
		require.True(t, info.Node.IsCompute())
		slice, err := e.tp.ClientSlice(info.ID)
		require.NoError(t, err)
		require.Equal(t, slice, info.Slice, "slice of client %d", info.ID)
		require.Equal(t, e.tp.SliceSize, info.SliceSize)
		c, slot, err := transport.ClientSlot(e.tp, info.ID)
		require.NoError(t, err)
		require.Equal(t, info.Node, c.Node())
		require.Equal(t, info.Slot, slot)
		// A client's slice starts clean and is its own to use.
		buf := make([]byte, 64)
		require.NoError(t, m.Read(e.ctx(), info.Slice, buf))
		require.Equal(t, make([]byte, 64), buf)
	}
}

func testBounds(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	m := e.client(0)
	ctx := e.ctx()
	node := e.tp.MemoryNodes()[0]
	info, _ := e.tp.Node(node)
	size := info.Size
	last := farmem.MakeAddr(node, size-8)
	require.NoError(t, m.Write(ctx, last, words(0x1111)))

	// Accesses running past the end fail and write nothing.
	require.ErrorIs(t, m.Write(ctx, farmem.MakeAddr(node, size-4), words(0xdead)), farmem.ErrOutOfRange)
	require.ErrorIs(t, m.Write(ctx, farmem.MakeAddr(node, size), []byte{1}), farmem.ErrOutOfRange)
	require.ErrorIs(t, m.Read(ctx, farmem.MakeAddr(node, size-4), make([]byte, 8)), farmem.ErrOutOfRange)
	_, err := m.CAS(ctx, farmem.MakeAddr(node, size), 0, 1)
	require.ErrorIs(t, err, farmem.ErrOutOfRange)
	_, err = m.FAA(ctx, farmem.MakeAddr(farmem.MaxMemoryNode, base), 1)
	require.ErrorIs(t, err, farmem.ErrOutOfRange, "a node that does not exist")
	buf := make([]byte, 8)
	require.NoError(t, m.Read(ctx, last, buf))
	require.Equal(t, uint64(0x1111), word(buf), "a rejected write changed memory")

	// Misaligned atomics fail and change nothing.
	a := e.mem(0, base)
	_, err = m.CAS(ctx, a.Add(4), 0, 1)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	_, err = m.FAA(ctx, a.Add(1), 1)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	_, err = m.MaskedCAS(ctx, a.Add(12), 0, 0, 1, 1)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	buf = make([]byte, 24)
	require.NoError(t, m.Read(ctx, a, buf))
	require.Equal(t, make([]byte, 24), buf)

	// A batch with a bad op applies nothing.
	var b farmem.Batch
	b.Write(a, words(7))
	b.FAA(a.Add(8), 1)
	b.CAS(a.Add(20), 0, 1)
	require.Error(t, m.Do(ctx, &b))
	_, err = b.Result(0)
	require.ErrorIs(t, err, farmem.ErrAborted)
	_, err = b.Result(1)
	require.ErrorIs(t, err, farmem.ErrAborted)
	_, err = b.Result(2)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	require.NoError(t, m.Read(ctx, a, buf))
	require.Equal(t, make([]byte, 24), buf, "a rejected batch changed memory")

	// Malformed input is an error, never a panic.
	require.ErrorIs(t, m.Do(ctx, &farmem.Batch{}), farmem.ErrInvalid)
	require.ErrorIs(t, m.Do(ctx, nil), farmem.ErrInvalid)
	require.ErrorIs(t, m.Read(ctx, a, make([]byte, farmem.MaxOpBytes+1)), farmem.ErrInvalid)
	require.NoError(t, m.Read(ctx, a, nil), "a zero-length read in range")
	b.Reset()
	b.Ops = append(b.Ops, farmem.Op{Kind: farmem.NumOpKinds, Addr: a})
	require.ErrorIs(t, m.Do(ctx, &b), farmem.ErrInvalid)
	_, err = m.Wait(ctx, m.Info().Slice, nil)
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

func testAtomicsTable(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	m := e.client(0)
	ctx := e.ctx()
	const max = ^uint64(0)
	cases := []struct {
		name        string
		init        uint64
		op          farmem.Op
		prev, after uint64
		failed      bool
	}{
		{"cas hit", 5, farmem.Op{Kind: farmem.OpCAS, Cmp: 5, Swap: 7}, 5, 7, false},
		{"cas miss", 5, farmem.Op{Kind: farmem.OpCAS, Cmp: 6, Swap: 7}, 5, 5, true},
		{"cas same value", 9, farmem.Op{Kind: farmem.OpCAS, Cmp: 9, Swap: 9}, 9, 9, false},
		{"faa", 5, farmem.Op{Kind: farmem.OpFAA, Swap: 3}, 5, 8, false},
		{"faa wraps", max, farmem.Op{Kind: farmem.OpFAA, Swap: 1}, max, 0, false},
		{"faa negative", 5, farmem.Op{Kind: farmem.OpFAA, Swap: ^uint64(1)}, 5, 3, false},
		{"faa negative wraps", 1, farmem.Op{Kind: farmem.OpFAA, Swap: ^uint64(1)}, 1, max, false},
		{"faa zero reads", 42, farmem.Op{Kind: farmem.OpFAA}, 42, 42, false},
		{"mcas hit", 0xaabb, farmem.Op{Kind: farmem.OpMaskedCAS, Cmp: 0x00bb, CmpMask: 0xff, Swap: 0x1100, SwapMask: 0xff00}, 0xaabb, 0x11bb, false},
		{"mcas miss", 0xaabb, farmem.Op{Kind: farmem.OpMaskedCAS, Cmp: 0xcc, CmpMask: 0xff, Swap: 0, SwapMask: max}, 0xaabb, 0xaabb, true},
		{"mcas compares only masked bits", 0xaabb, farmem.Op{Kind: farmem.OpMaskedCAS, Cmp: 0xffbb, CmpMask: 0xff, Swap: 1, SwapMask: 1}, 0xaabb, 0xaabb, false},
		{"mcas full masks is cas", 3, farmem.Op{Kind: farmem.OpMaskedCAS, Cmp: 3, CmpMask: max, Swap: 4, SwapMask: max}, 3, 4, false},
		{"mcas empty compare mask swaps", 0xf0f0, farmem.Op{Kind: farmem.OpMaskedCAS, Swap: 0x0f0f, SwapMask: 0xffff}, 0xf0f0, 0x0f0f, false},
		{"mcas swap outside mask ignored", 0, farmem.Op{Kind: farmem.OpMaskedCAS, Swap: 0xffff, SwapMask: 0xff}, 0, 0xff, false},
		{"mcas high half", 0x1234_5678_0000_0001, farmem.Op{Kind: farmem.OpMaskedCAS, Cmp: 1, CmpMask: 0xffff_ffff, Swap: 0x9999_0000_0000_0000, SwapMask: 0xffff_0000_0000_0000}, 0x1234_5678_0000_0001, 0x9999_5678_0000_0001, false},
	}
	before := m.Stats()
	wantFailed := uint64(0)
	for i, tc := range cases {
		a := e.mem(i%len(e.tp.MemoryNodes()), base+uint64(i)*8)
		// Initialize with an atomic, so the word is only ever written by atomics.
		prev, err := m.CAS(ctx, a, 0, tc.init)
		require.NoError(t, err, tc.name)
		require.Zero(t, prev, tc.name)
		op := tc.op
		op.Addr = a
		var b farmem.Batch
		b.Ops = append(b.Ops, op)
		require.NoError(t, m.Do(ctx, &b), tc.name)
		got, err := b.Result(0)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.prev, got, "%s: previous word", tc.name)
		buf := make([]byte, 8)
		require.NoError(t, m.Read(ctx, a, buf), tc.name)
		require.Equal(t, tc.after, word(buf), "%s: word after", tc.name)
		if tc.failed {
			wantFailed++
		}
	}
	require.Equal(t, wantFailed, m.Stats().Sub(before).FailedCAS, "failed comparisons counted")
}

func testFAASum(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	const clients, each = 8, 250
	ms := make([]farmem.Memory, clients)
	for i := range ms {
		ms[i] = e.client(i)
	}
	ctx := e.ctx()
	c1, c2 := e.mem(0, base), e.mem(1, base)
	seen := make([]atomic.Bool, clients*each)
	err := e.parallel(clients, func(i int) error {
		m := ms[i]
		for k := range each {
			prev, err := m.FAA(ctx, c1, 1)
			if err != nil {
				return err
			}
			if prev >= clients*each || seen[prev].Swap(true) {
				return fmt.Errorf("FAA returned %d twice or out of range", prev)
			}
			delta := uint64(3)
			if k%2 == 1 {
				delta = ^uint64(0) // -1
			}
			if _, err := m.FAA(ctx, c2, delta); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	buf := make([]byte, 8)
	require.NoError(t, ms[0].Read(ctx, c1, buf))
	require.Equal(t, uint64(clients*each), word(buf))
	require.NoError(t, ms[0].Read(ctx, c2, buf))
	require.Equal(t, uint64(clients*each), word(buf), "+3 and -1 alternating")
}

func testCASLoop(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	const clients, each = 6, 150
	ms := make([]farmem.Memory, clients)
	for i := range ms {
		ms[i] = e.client(i)
	}
	ctx := e.ctx()
	a := e.mem(2, base)
	var misses atomic.Uint64
	err := e.parallel(clients, func(i int) error {
		m := ms[i]
		buf := make([]byte, 8)
		if err := m.Read(ctx, a, buf); err != nil {
			return err
		}
		cur := word(buf)
		for range each {
			for {
				prev, err := m.CAS(ctx, a, cur, cur+1)
				if err != nil {
					return err
				}
				if prev == cur {
					cur++
					break
				}
				misses.Add(1)
				cur = prev
			}
		}
		return nil
	})
	require.NoError(t, err)
	buf := make([]byte, 8)
	require.NoError(t, ms[0].Read(ctx, a, buf))
	require.Equal(t, uint64(clients*each), word(buf))
	var failed uint64
	for _, m := range ms {
		failed += m.Stats().FailedCAS
	}
	require.Equal(t, misses.Load(), failed, "FailedCAS counts every failed CAS")
}

func testBatchOrder(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	m := e.client(0)

	// An atomic then a read of the same word, in one batch: the read sees the atomic.
	a := e.mem(0, base)
	var b farmem.Batch
	b.FAA(a, 5)
	buf := make([]byte, 8)
	b.Read(a, buf)
	b.CAS(a, 5, 9)
	buf2 := make([]byte, 8)
	b.Read(a, buf2)
	require.NoError(t, m.Do(ctx, &b))
	require.Equal(t, uint64(5), word(buf))
	require.Equal(t, uint64(9), word(buf2))

	// A write then a read of it, in one batch.
	x := e.mem(1, base)
	b.Reset()
	b.Write(x, words(1, 2, 3, 4))
	got := make([]byte, 32)
	b.Read(x, got)
	require.NoError(t, m.Do(ctx, &b))
	require.Equal(t, words(1, 2, 3, 4), got)

	// WRITE then CAS, another client reading: whoever sees the CAS sees the WRITE.
	writer, reader := e.client(0), e.client(1)
	data, flag := e.mem(2, base), e.mem(2, base+4096)
	const rounds = 300
	var done atomic.Bool
	err := e.parallel(2, func(i int) error {
		if i == 0 {
			defer done.Store(true)
			var b farmem.Batch
			for v := uint64(1); v <= rounds; v++ {
				b.Reset()
				b.Write(data, words(v, v, v, v))
				b.CAS(flag, v-1, v)
				if err := writer.Do(ctx, &b); err != nil {
					return err
				}
				if prev, _ := b.Result(1); prev != v-1 {
					return fmt.Errorf("flag was %d, want %d", prev, v-1)
				}
			}
			return nil
		}
		fb, db := make([]byte, 8), make([]byte, 32)
		for !done.Load() {
			if err := reader.Read(ctx, flag, fb); err != nil {
				return err
			}
			if err := reader.Read(ctx, data, db); err != nil {
				return err
			}
			f := word(fb)
			for w := range 4 {
				if d := word(db[8*w:]); d < f {
					return fmt.Errorf("saw flag %d but data word %d = %d", f, w, d)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
}

func testTearing(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	writer, reader := e.client(0), e.client(1)
	const nwords = 64
	a := e.mem(0, base)
	pattern := func(v uint64) uint64 { return (v%255 + 1) * 0x0101010101010101 }
	var done atomic.Bool
	var torn, reads atomic.Int64
	err := e.parallel(2, func(i int) error {
		if i == 0 {
			buf := make([]byte, 8*nwords)
			for v := uint64(0); !done.Load(); v++ {
				for w := range nwords {
					putWord(buf[8*w:], pattern(v))
				}
				if err := writer.Write(ctx, a, buf); err != nil {
					return err
				}
			}
			return nil
		}
		defer done.Store(true)
		buf := make([]byte, 8*nwords)
		one := make([]byte, 8)
		bound, overlaps := DefaultTearingReads, int64(TearingOverlaps)
		if e.cl.TearingReads > 0 {
			bound = e.cl.TearingReads
		}
		if e.cl.TearsOnPurpose {
			overlaps = 3
		}
		for k := 0; k < bound; k++ {
			if err := reader.Read(ctx, a, buf); err != nil {
				return err
			}
			reads.Add(1)
			first := word(buf)
			mixed := false
			for w := range nwords {
				v := word(buf[8*w:])
				if v != 0 && v != (v&0xff)*0x0101010101010101 {
					return fmt.Errorf("word %d tore inside itself: %#x", w, v)
				}
				mixed = mixed || v != first
			}
			if mixed {
				torn.Add(1)
			}
			if err := reader.Read(ctx, a.Add(8*uint64(k%nwords)), one); err != nil {
				return err
			}
			if v := word(one); v != 0 && v != (v&0xff)*0x0101010101010101 {
				return fmt.Errorf("an 8-byte read tore: %#x", v)
			}
			if torn.Load() >= overlaps && k >= 200 {
				break
			}
		}
		return nil
	})
	require.NoError(t, err)
	t.Logf("%d of %d long reads were torn word-wise", torn.Load(), reads.Load())
	if e.cl.TearsOnPurpose {
		require.Positive(t, torn.Load(), "the transport tears on purpose, yet no read tore")
	}
}

func testUnsignaled(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	m := e.client(0)
	a := e.mem(1, base)
	const n = 20
	for range n {
		var b farmem.Batch
		b.Unsignaled(b.FAA(a, 1))
		p := m.Post(ctx, &b)
		require.Zero(t, transport.Signaled(p))
		require.NoError(t, p.Wait(ctx, 0), "nothing to wait for")
	}
	buf := make([]byte, 8)
	require.NoError(t, m.Read(ctx, a, buf), "the next op to the node")
	require.Equal(t, uint64(n), word(buf), "unsignaled FAAs applied before the next op")

	// An unsignaled write, then a signaled read in the next batch.
	x := e.mem(1, base+64)
	var b1 farmem.Batch
	b1.Unsignaled(b1.Write(x, words(77)))
	m.Post(ctx, &b1)
	var b2 farmem.Batch
	b2.Read(x, buf)
	require.NoError(t, m.Do(ctx, &b2))
	require.Equal(t, uint64(77), word(buf))
	require.Equal(t, uint64(n+1), m.Stats().Unsignaled)
}

func testExactStats(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	hs := e.hosted()
	require.NoError(t, hs[1].f.Handle(hs[1].id, 7, func(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		return []byte("abc"), nil
	}))
	peer := e.client(1)
	m := e.client(0)
	require.Equal(t, farmem.Stats{}, m.Stats(), "a new client has counted nothing")
	m0, m1, m2 := e.mem(0, base), e.mem(1, base), e.mem(2, base)
	buf := make([]byte, 16)

	require.NoError(t, m.Write(ctx, m0, make([]byte, 16)))
	require.NoError(t, m.Read(ctx, m0, buf))
	_, err := m.CAS(ctx, m0, 0, 1)
	require.NoError(t, err)
	_, err = m.CAS(ctx, m0, 0, 2) // fails
	require.NoError(t, err)
	_, err = m.FAA(ctx, m1, 1)
	require.NoError(t, err)
	_, err = m.MaskedCAS(ctx, m1, 1, 1, 2, 2)
	require.NoError(t, err)
	var b farmem.Batch
	b.Read(m0, make([]byte, 8)) // distinct buffers: the nodes are read in parallel
	b.Read(m1, make([]byte, 8))
	b.Read(m2, make([]byte, 8))
	require.NoError(t, m.Do(ctx, &b))
	var u farmem.Batch
	u.Unsignaled(u.FAA(m2, 1))
	m.Post(ctx, &u)
	require.NoError(t, m.Write(ctx, m.Info().Slice, buf[:8]))
	require.NoError(t, m.Read(ctx, peer.Info().Slice, buf[:8]))
	reply, err := m.Call(ctx, hs[1].id, 7, []byte("hello"))
	require.NoError(t, err)
	require.Equal(t, []byte("abc"), reply)
	_, err = m.Wait(ctx, m.Info().Slice, func(uint64) bool { return true })
	require.NoError(t, err)

	var want farmem.Stats
	want.RoundTrips = 9 // 6 verbs, the 3-node batch, the read of the peer's slice, the Call
	want.Verbs[farmem.TargetMemory][farmem.OpWrite] = 1
	want.Verbs[farmem.TargetMemory][farmem.OpRead] = 4
	want.Verbs[farmem.TargetMemory][farmem.OpCAS] = 2
	want.Verbs[farmem.TargetMemory][farmem.OpFAA] = 2
	want.Verbs[farmem.TargetMemory][farmem.OpMaskedCAS] = 1
	want.Verbs[farmem.TargetLocal][farmem.OpWrite] = 1
	want.Verbs[farmem.TargetCompute][farmem.OpRead] = 1
	want.Unsignaled = 1
	want.BytesOut = 16 + 16 + 16 + 8 + 16 + 8 + 8 // write, 2 CAS, FAA, MaskedCAS, unsignaled FAA, local write
	want.BytesIn = 16 + 8 + 8 + 8 + 8 + 24 + 8    // read, 2 CAS, FAA, MaskedCAS, 3 reads, peer read
	want.FailedCAS = 1
	want.Calls, want.CallBytesOut, want.CallBytesIn = 1, 5, 3
	want.Waits = 1
	require.Equal(t, want, m.Stats())
}
