package kvstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/kvstore"
)

// BenchmarkCXL measures operations on a store over a cxl region (memfd, one process): Get,
// AppendGet into a reused buffer and Put of 11-byte keys ("key" and 8 bytes) and 100-byte
// values over 10,000 loaded keys, through a Session (one goroutine), and Get through the
// Store's pool from GOMAXPROCS goroutines. It reports round trips per operation from the
// store's counters.
func BenchmarkCXL(b *testing.B) {
	r, err := cxl.Create("", cxl.Options{Shape: cxl.Shape{MemoryNodes: 1, MemorySize: 256 << 20}})
	require.NoError(b, err)
	defer r.Close()
	f, err := r.Attach(cxl.OpenOptions{})
	require.NoError(b, err)
	defer f.Close()
	ctx := context.Background()
	s, err := kvstore.Open(ctx, f, kvstore.Options{})
	require.NoError(b, err)
	defer s.Close()
	const keys = 10000
	for i := range uint64(keys) {
		require.NoError(b, s.Insert(ctx, key(i), val(i, 100)))
	}
	perOp := func(b *testing.B, run func(b *testing.B)) {
		before := s.Stats()
		run(b)
		d := s.Stats().Sub(before)
		b.ReportMetric(float64(d.RoundTrips)/float64(b.N), "rtt/op")
	}
	// The keys are made before the loops, so that the loops measure the store alone.
	names := make([][]byte, keys)
	for i := range names {
		names[i] = key(uint64(i))
	}
	value := val(1, 100)
	b.Run("session/get", func(b *testing.B) {
		ss, err := s.Session(ctx)
		require.NoError(b, err)
		defer ss.Close()
		perOp(b, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := ss.Get(ctx, names[i%keys]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("session/append-get", func(b *testing.B) {
		ss, err := s.Session(ctx)
		require.NoError(b, err)
		defer ss.Close()
		buf := make([]byte, 0, 128)
		perOp(b, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if buf, err = ss.AppendGet(ctx, buf[:0], names[i%keys]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("session/put", func(b *testing.B) {
		ss, err := s.Session(ctx)
		require.NoError(b, err)
		defer ss.Close()
		perOp(b, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if err := ss.Put(ctx, names[i%keys], value); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("store/get-parallel", func(b *testing.B) {
		perOp(b, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if _, err := s.Get(ctx, names[i*7919%keys]); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	})
}
