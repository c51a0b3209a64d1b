package far_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/far/farcoll"
	"github.com/farmem/farmem/farmem"
)

// point64Codec is a hand-written codec for point64: what a program writes for a hot type, and
// the decode the raw baseline uses.
type point64Codec struct{}

func (point64Codec) Size() int { return 64 }

func (point64Codec) Encode(b []byte, p point64) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(p.X))
	le.PutUint64(b[8:], uint64(p.Y))
	le.PutUint64(b[16:], uint64(p.Z))
	le.PutUint64(b[24:], uint64(p.W))
	le.PutUint64(b[32:], p.T)
	le.PutUint32(b[40:], p.ID)
	le.PutUint32(b[44:], p.Flags)
	le.PutUint64(b[48:], math.Float64bits(p.Sum))
	copy(b[56:64], p.Tag[:])
}

func (point64Codec) Decode(b []byte) point64 {
	le := binary.LittleEndian
	p := point64{
		X: int64(le.Uint64(b[0:])), Y: int64(le.Uint64(b[8:])), Z: int64(le.Uint64(b[16:])),
		W: int64(le.Uint64(b[24:])), T: le.Uint64(b[32:]), ID: le.Uint32(b[40:]),
		Flags: le.Uint32(b[44:]), Sum: math.Float64frombits(le.Uint64(b[48:])),
	}
	copy(p.Tag[:], b[56:64])
	return p
}

var samplePoint = point64{X: 1, Y: -2, Z: 3, W: -4, T: 5, ID: 6, Flags: 7, Sum: 8.5, Tag: [8]byte{'f', 'a', 'r'}}

// cxlClient opens a far.Client on a fresh cxl region in a temporary file.
func cxlClient(tb testing.TB) *far.Client {
	tb.Helper()
	r, err := cxl.CreateTemp("", "far-bench-*", cxl.Options{Shape: cxl.Shape{MemoryNodes: 1, MemorySize: 16 << 20, ComputeNodes: 2}})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = r.Close() })
	f, err := r.Attach(cxl.OpenOptions{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = f.Close() })
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = m.Close() })
	c, err := far.NewClient(context.Background(), m, quiet)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// rawBlocks allocates, on c's memory, a 64-byte block holding samplePoint's encoding (what a
// raw Read reads) and a 72-byte block holding a zero version word and then that encoding (a
// hand-written sequence lock's layout).
func rawBlocks(tb testing.TB, c *far.Client) (raw, seq farmem.Addr) {
	tb.Helper()
	ctx := context.Background()
	buf := make([]byte, 72)
	point64Codec{}.Encode(buf[8:], samplePoint)
	raw, err := c.Allocator().Alloc(ctx, 64, 8)
	require.NoError(tb, err)
	require.NoError(tb, c.Memory().Write(ctx, raw, buf[8:]))
	seq, err = c.Allocator().Alloc(ctx, 72, 8)
	require.NoError(tb, err)
	require.NoError(tb, c.Memory().Write(ctx, seq, buf))
	return raw, seq
}

// BenchmarkLoad64 sets a typed load of a 64-byte struct beside the raw verbs it is made of,
// on cxl, in one run:
//
//	raw-read+decode         one 64-byte Read and the hand-written decode (not linearizable
//	                        under a concurrent writer: it may tear)
//	raw-seqlock+decode      a sequence lock's batch (version, value, version) by hand
//	typed/<mode>/<codec>    Ptr.Load
func BenchmarkLoad64(b *testing.B) {
	c := cxlClient(b)
	ctx := context.Background()
	m := c.Memory()
	hand := far.Codec[point64](point64Codec{})
	bin := far.MustBinary[point64]()
	raw, seq := rawBlocks(b, c)
	buf := make([]byte, 80)

	b.Run("raw-read+decode", func(b *testing.B) {
		a := raw
		b.ReportAllocs()
		var sink point64
		for b.Loop() {
			if err := m.Read(ctx, a, buf[:64]); err != nil {
				b.Fatal(err)
			}
			sink = hand.Decode(buf[:64])
		}
		require.Equal(b, samplePoint, sink)
	})
	b.Run("raw-seqlock+decode", func(b *testing.B) {
		var bt farmem.Batch
		b.ReportAllocs()
		var sink point64
		for b.Loop() {
			bt.Reset()
			bt.Read(seq, buf[0:8])
			bt.Read(seq.Add(8), buf[16:80])
			bt.Read(seq, buf[8:16])
			if err := m.Do(ctx, &bt); err != nil {
				b.Fatal(err)
			}
			if binary.LittleEndian.Uint64(buf[0:8]) != binary.LittleEndian.Uint64(buf[8:16]) {
				b.Fatal("torn")
			}
			sink = hand.Decode(buf[16:80])
		}
		require.Equal(b, samplePoint, sink)
	})
	for _, mode := range []far.Mode{far.SingleWriter, far.OutOfPlace, far.Locked} {
		for name, codec := range map[string]far.Codec[point64]{"hand": hand, "binary": bin} {
			p, err := far.NewPtr(ctx, c, samplePoint, far.PtrOptions[point64]{Mode: mode, Codec: codec})
			require.NoError(b, err)
			b.Run("typed/"+mode.String()+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				var sink point64
				for b.Loop() {
					if sink, err = p.Load(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
				require.Equal(b, samplePoint, sink)
			})
		}
	}
	b.Run("raw-decode-binary", func(b *testing.B) {
		bin.Encode(buf[:64], samplePoint)
		b.ReportAllocs()
		for b.Loop() {
			_ = bin.Decode(buf[:64])
		}
	})
}

// BenchmarkWord sets the atomic words beside the raw verbs on cxl.
func BenchmarkWord(b *testing.B) {
	c := cxlClient(b)
	ctx := context.Background()
	m := c.Memory()
	u, err := far.NewUint64(ctx, c, 0, 1)
	require.NoError(b, err)
	var buf [8]byte
	b.Run("raw-read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = m.Read(ctx, u.Addr(), buf[:])
		}
	})
	b.Run("typed-load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = u.Load(ctx, c)
		}
	})
	b.Run("raw-faa", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = m.FAA(ctx, u.Addr(), 1)
		}
	})
	b.Run("typed-add", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = u.Add(ctx, c, 1)
		}
	})
}

// TestLoadAllocs: typed loads (Load and LoadInto) on cxl allocate nothing, in every mode and
// with both codecs.
func TestLoadAllocs(t *testing.T) {
	c := cxlClient(t)
	ctx := context.Background()
	for _, mode := range []far.Mode{far.SingleWriter, far.OutOfPlace, far.Locked} {
		for name, codec := range map[string]far.Codec[point64]{"hand": point64Codec{}, "binary": far.MustBinary[point64]()} {
			p, err := far.NewPtr(ctx, c, samplePoint, far.PtrOptions[point64]{Mode: mode, Codec: codec})
			require.NoError(t, err)
			_, _ = p.Load(ctx, c) // grows the scratch buffer
			allocs := testing.AllocsPerRun(200, func() {
				v, err := p.Load(ctx, c)
				if err != nil || v != samplePoint {
					t.Fatalf("load: %v %v", v, err)
				}
			})
			require.Zero(t, allocs, "%v/%s", mode, name)
			var into point64
			allocs = testing.AllocsPerRun(200, func() {
				if err := p.LoadInto(ctx, c, &into); err != nil || into != samplePoint {
					t.Fatalf("load into: %v %v", into, err)
				}
			})
			require.Zero(t, allocs, "%v/%s into", mode, name)
		}
	}
	w, err := far.NewPtr(ctx, c, int32(3), far.PtrOptions[int32]{})
	require.NoError(t, err)
	u, err := far.NewUint64(ctx, c, 0, 1)
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(200, func() {
		_, _ = w.Load(ctx, c)
		_ = w.Store(ctx, c, 4)
		_, _ = u.Add(ctx, c, 1)
	}))
}

// opaque holds the hand codec behind the interface, set at run time so that the compiler cannot
// devirtualize (and inline) its calls.
var opaque far.Codec[point64]

// BenchmarkLoad64Ratio measures the typed load of a 64-byte struct and its raw counterparts
// interleaved, in rounds, and reports for each the least time per operation over the rounds
// (robust to a busy machine) and the ratios:
//
//	typed/read     Ptr.Load (SingleWriter, hand codec: one Read of the record, the check, the
//	               decode) over one raw 64-byte Read and the same decode, inlined, which is not
//	               linearizable under a concurrent writer: the cost of consistency and of the
//	               typed layer
//	typed/read-iface  the same over the raw Read and the decode called through far.Codec, as
//	               any typed code calls it
//	typed/seqlock  the same over a sequence lock written by hand (three Reads in one batch:
//	               version, value, version), the single-writer load before the record
//	binary/read    Ptr.Load with the default Binary codec over one raw Read and hand decode
//	elem/read      farcoll.Array.Get of a 64-byte element (one Read and the decode; not atomic
//	               under a concurrent writer of that element) over the raw Read and inlined decode
//	elem/read-iface  the same over a raw Read and the decode called through far.Codec
//	into/read96-iface  Ptr.LoadInto over a raw Read of the record's 96 bytes and the decode
//	               called through far.Codec: what the torn-read check (with the restoring of
//	               the displaced bytes) and the typed layer's call cost, and nothing else
func BenchmarkLoad64Ratio(b *testing.B) {
	opaque = point64Codec{}
	c := cxlClient(b)
	ctx := context.Background()
	m := c.Memory()
	hand := far.Codec[point64](point64Codec{})
	raw, seq := rawBlocks(b, c)
	sw, err := far.NewPtr(ctx, c, samplePoint, far.PtrOptions[point64]{Mode: far.SingleWriter, Codec: hand})
	require.NoError(b, err)
	swb, err := far.NewPtr(ctx, c, samplePoint, far.PtrOptions[point64]{Mode: far.SingleWriter})
	require.NoError(b, err)
	arr, err := farcoll.NewArray(ctx, c, 4, farcoll.ArrayOptions[point64]{Codec: hand})
	require.NoError(b, err)
	require.NoError(b, arr.Set(ctx, c, 1, samplePoint))
	rec96, err := c.Allocator().Alloc(ctx, 96, 8)
	require.NoError(b, err)
	buf := make([]byte, 96)
	point64Codec{}.Encode(buf, samplePoint)
	require.NoError(b, m.Write(ctx, rec96, buf))
	var bt farmem.Batch
	var sink point64
	fns := []func(){
		func() { // raw read + decode
			_ = m.Read(ctx, raw, buf[:64])
			sink = hand.Decode(buf[:64])
		},
		func() { // raw seqlock + decode
			bt.Reset()
			bt.Read(seq, buf[0:8])
			bt.Read(seq.Add(8), buf[16:80])
			bt.Read(seq, buf[8:16])
			_ = m.Do(ctx, &bt)
			if binary.LittleEndian.Uint64(buf[0:8]) == binary.LittleEndian.Uint64(buf[8:16]) {
				sink = hand.Decode(buf[16:80])
			}
		},
		func() { sink, _ = sw.Load(ctx, c) },
		func() { sink, _ = swb.Load(ctx, c) },
		func() { sink, _ = arr.Get(ctx, c, 1) },
		func() { // raw read + the codec's decode called through far.Codec, as typed code calls it
			_ = m.Read(ctx, raw, buf[:64])
			sink = opaque.Decode(buf[:64])
		},
		func() { _ = sw.LoadInto(ctx, c, &sink) },
		func() { // a raw Read as long as the record, and the decode through far.Codec
			_ = m.Read(ctx, rec96, buf[:96])
			sink = opaque.Decode(buf[:64])
		},
	}
	best := minPerOp(b, fns)
	require.Equal(b, samplePoint, sink)
	b.ReportMetric(best[0], "raw-read-ns")
	b.ReportMetric(best[1], "raw-seqlock-ns")
	b.ReportMetric(best[2], "typed-ns")
	b.ReportMetric(best[3], "typed-binary-ns")
	b.ReportMetric(best[2]/best[1], "typed/seqlock")
	b.ReportMetric(best[2]/best[0], "typed/read")
	b.ReportMetric(best[2]/best[5], "typed/read-iface")
	b.ReportMetric(best[3]/best[0], "binary/read")
	b.ReportMetric(best[4], "elem-ns")
	b.ReportMetric(best[4]/best[0], "elem/read")
	b.ReportMetric(best[5], "raw-read-iface-ns")
	b.ReportMetric(best[4]/best[5], "elem/read-iface")
	b.ReportMetric(best[6], "typed-into-ns")
	b.ReportMetric(best[6]/best[0], "into/read")
	b.ReportMetric(best[6]/best[5], "into/read-iface")
	b.ReportMetric(best[7], "raw-read96-iface-ns")
	b.ReportMetric(best[6]/best[7], "into/read96-iface")
}

// minPerOp runs each fn in turn, b.N times in all spread over rounds, and returns each one's
// least time per call over the rounds.
func minPerOp(b *testing.B, fns []func()) []float64 {
	const per = 2000
	rounds := max(b.N/per, 5)
	best := make([]float64, len(fns))
	for i := range best {
		best[i] = math.Inf(1)
	}
	b.ResetTimer()
	for range rounds {
		for i, fn := range fns {
			start := time.Now()
			for range per {
				fn()
			}
			best[i] = min(best[i], float64(time.Since(start).Nanoseconds())/per)
		}
	}
	return best
}
