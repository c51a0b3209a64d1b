package far_test

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
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

// DecodeInto sets the fields in place (far.DecoderInto).
func (point64Codec) DecodeInto(b []byte, p *point64) {
	le := binary.LittleEndian
	_ = b[63]
	p.X, p.Y, p.Z, p.W = int64(le.Uint64(b[0:])), int64(le.Uint64(b[8:])), int64(le.Uint64(b[16:])), int64(le.Uint64(b[24:]))
	p.T, p.ID, p.Flags = le.Uint64(b[32:]), le.Uint32(b[40:]), le.Uint32(b[44:])
	p.Sum = math.Float64frombits(le.Uint64(b[48:]))
	copy(p.Tag[:], b[56:64])
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
//	raw-decode-binary       the Binary codec's Decode alone (no verb)
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
			if err := m.Read(ctx, u.Addr(), buf[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed-load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := u.Load(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-faa", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.FAA(ctx, u.Addr(), 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed-add", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := u.Add(ctx, c, 1); err != nil {
				b.Fatal(err)
			}
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

// BenchmarkLoad64Ratio is the typed load of a 64-byte struct on cxl beside the raw Read and
// decode it is made of, measured in the same run on the same client, reading the same bytes:
// the raw variants read the 64 bytes of the value where they lie inside the pointer's record
// (which holds the value as encoded, between its two version words). The variants run in
// rounds of loadRound calls each, their order rotated from round to round so that a drift of
// the machine's speed (other processes on a busy machine) falls on all of them alike; each
// round gives each variant a time per call, and the ratios are taken round by round:
//
//	raw        one 64-byte Read and the hand-written decode, in place (DecodeInto, called
//	           directly): the least a program can spend to read the value, and not
//	           linearizable under a concurrent writer
//	raw-value  the same with the decode returning the value (Decode, inlined)
//	into       Ptr.LoadInto of the SingleWriter pointer with the same codec, through the Codec
//	           interface: one Read of the 80-byte record, the version check, DecodeInto
//	load       Ptr.Load, the same returning the value (compared with raw-value)
//	batch      the three Reads in one batch (version, value, version) and the decode by hand:
//	           what a single-writer load costs on a Memory that does not read in address order
//	binary     Ptr.LoadInto with the default Binary codec (reflect)
//	elem-into  farcoll.Array.GetInto of a 64-byte element (one Read and DecodeInto; not atomic
//	           under a concurrent writer of that element)
//	elem       farcoll.Array.Get, the same returning the value (compared with raw-value)
//
// Reported: ns/op is the time of one round (b.N is the number of rounds), B/op and allocs/op
// its allocations (TestLoadAllocs and TestLoadIntoStack assert that a load allocates
// nothing); each variant's
// median time per call over the rounds (<v>-ns), and the median over
// the rounds of each round's ratio to its raw counterpart (<v>/raw, load/raw-value,
// elem/raw-value), with the 10th and 90th percentiles of into/raw (into/raw-p10, into/raw-p90):
// the spread within the run. The target is into/raw at most 1.1. The header of the
// output names the CPU.
func BenchmarkLoad64Ratio(b *testing.B) {
	c := cxlClient(b)
	ctx := context.Background()
	m := c.Memory()
	hand := far.Codec[point64](point64Codec{})
	sw, err := far.NewPtr(ctx, c, samplePoint, far.PtrOptions[point64]{Mode: far.SingleWriter, Codec: hand})
	require.NoError(b, err)
	swb, err := far.NewPtr(ctx, c, samplePoint, far.PtrOptions[point64]{Mode: far.SingleWriter})
	require.NoError(b, err)
	arr, err := farcoll.NewArray(ctx, c, 4, farcoll.ArrayOptions[point64]{Codec: hand})
	require.NoError(b, err)
	require.NoError(b, arr.Set(ctx, c, 1, samplePoint))
	rec, val := sw.Addr(), sw.Addr().Add(8) // the record, and the value inside it
	buf := make([]byte, 80)
	var bt farmem.Batch
	var sinks [8]point64
	names := []string{"raw", "raw-value", "into", "load", "batch", "binary", "elem", "elem-into"}
	fns := []func(){
		func() {
			_ = m.Read(ctx, val, buf[:64])
			point64Codec{}.DecodeInto(buf[:64], &sinks[0])
		},
		func() {
			_ = m.Read(ctx, val, buf[:64])
			sinks[1] = point64Codec{}.Decode(buf[:64])
		},
		func() { _ = sw.LoadInto(ctx, c, &sinks[2]) },
		func() { sinks[3], _ = sw.Load(ctx, c) },
		func() {
			bt.Reset()
			bt.Read(rec, buf[0:8])
			bt.Read(val, buf[8:72])
			bt.Read(rec.Add(72), buf[72:80])
			_ = m.Do(ctx, &bt)
			if binary.LittleEndian.Uint64(buf[0:8]) == binary.LittleEndian.Uint64(buf[72:80]) {
				point64Codec{}.DecodeInto(buf[8:72], &sinks[4])
			}
		},
		func() { _ = swb.LoadInto(ctx, c, &sinks[5]) },
		func() { sinks[6], _ = arr.Get(ctx, c, 1) },
		func() { _ = arr.GetInto(ctx, c, 1, &sinks[7]) },
	}
	b.ReportAllocs() // per round of 8*loadRound calls
	per := interleaved(b, fns)
	// The timed calls drop their errors (returning them to be checked made into's calls 7 ns
	// slower, a fifth, and no other's): the same verbs and loads, once more with their errors
	// checked, and the values the timed calls decoded, tell a variant that failed.
	var v point64
	require.NoError(b, m.Read(ctx, val, buf[:64]), "raw")
	require.NoError(b, sw.LoadInto(ctx, c, &v), "into")
	_, err = sw.Load(ctx, c)
	require.NoError(b, err, "load")
	bt.Reset()
	bt.Read(rec, buf[0:8])
	bt.Read(val, buf[8:72])
	bt.Read(rec.Add(72), buf[72:80])
	require.NoError(b, m.Do(ctx, &bt), "batch")
	require.NoError(b, swb.LoadInto(ctx, c, &v), "binary")
	_, err = arr.Get(ctx, c, 1)
	require.NoError(b, err, "elem")
	require.NoError(b, arr.GetInto(ctx, c, 1, &v), "elem-into")
	for i, s := range sinks {
		require.Equal(b, samplePoint, s, names[i])
	}
	ratio := func(num, den int) []float64 {
		rs := make([]float64, len(per[num]))
		for r := range rs {
			rs[r] = per[num][r] / per[den][r]
		}
		slices.Sort(rs)
		return rs
	}
	for i, name := range names {
		b.ReportMetric(median(per[i]), name+"-ns")
	}
	into := ratio(2, 0)
	b.ReportMetric(median(into), "into/raw")
	b.ReportMetric(into[len(into)/10], "into/raw-p10")
	b.ReportMetric(into[len(into)*9/10], "into/raw-p90")
	b.ReportMetric(median(ratio(3, 1)), "load/raw-value")
	b.ReportMetric(median(ratio(4, 0)), "batch/raw")
	b.ReportMetric(median(ratio(5, 0)), "binary/raw")
	b.ReportMetric(median(ratio(6, 1)), "elem/raw-value")
	b.ReportMetric(median(ratio(7, 0)), "elem-into/raw")
}

// loadRound is how many calls of one variant a round of interleaved runs: long enough for the
// clock, short enough that rounds are many.
const loadRound = 500

// interleaved runs fns in b.N rounds (so ns/op is the time of one round), each fn loadRound
// times per round, rotating their order from round to round, and returns per fn its time per
// call in each round.
func interleaved(b *testing.B, fns []func()) [][]float64 {
	rounds := b.N
	per := make([][]float64, len(fns))
	for i := range per {
		per[i] = make([]float64, rounds)
	}
	for _, fn := range fns { // warm the scratch buffers and the caches
		for range loadRound {
			fn()
		}
	}
	b.ResetTimer()
	for r := range rounds {
		for j := range fns {
			i := (r + j) % len(fns)
			if r%2 == 1 {
				i = (r + len(fns) - 1 - j) % len(fns)
			}
			fn := fns[i]
			start := time.Now()
			for range loadRound {
				fn()
			}
			per[i][r] = float64(time.Since(start).Nanoseconds()) / loadRound
		}
	}
	return per
}

// median returns the median of xs (which it sorts).
func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
