//go:build linux

package cxl_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/numaemu"
)

// benchRegion is a one-memory-node memfd region with one attached compute node.
func benchRegion(b *testing.B, o cxl.OpenOptions) (farmem.Memory, *cxl.Fabric) {
	r, err := cxl.Create("", cxl.Options{
		Shape: transport.Shape{MemoryNodes: 1, MemorySize: 1 << 20, ComputeNodes: 2, SliceSize: 4 << 10, SharedSize: 64 << 10},
	})
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.Close() })
	f, err := r.Attach(o)
	require.NoError(b, err)
	b.Cleanup(func() { _ = f.Close() })
	m, err := f.Open(context.Background(), f.ID())
	require.NoError(b, err)
	return m, f
}

// BenchmarkVerb measures ns per verb (ns/op: one verb per iteration) on one memory node of a
// memfd region, from one client, beside a Go atomic on heap memory (the limit): with the
// Coherent and Uncached policies, and with each numaemu latency profile injected (Coherent).
// Each verb's row reports the latency injected per verb (inject-ns, 0 without a profile).
func BenchmarkVerb(b *testing.B) {
	b.Run("heap-atomic/faa", func(b *testing.B) {
		var w atomic.Uint64
		for b.Loop() {
			w.Add(1)
		}
	})
	b.Run("heap-atomic/load", func(b *testing.B) {
		var w atomic.Uint64
		var sink uint64
		for b.Loop() {
			sink += w.Load()
		}
		_ = sink
	})
	type config struct {
		name string
		o    cxl.OpenOptions
	}
	configs := []config{
		{"coherent", cxl.OpenOptions{Policy: cxl.Coherent}},
		{"uncached", cxl.OpenOptions{Policy: cxl.Uncached}},
	}
	for _, p := range numaemu.Profiles() {
		configs = append(configs, config{"coherent+" + p.Name, cxl.OpenOptions{Policy: cxl.Coherent, Profile: &p}})
	}
	for _, cfg := range configs {
		b.Run(cfg.name, func(b *testing.B) {
			m, f := benchRegion(b, cfg.o)
			ctx := context.Background()
			a := farmem.MakeAddr(1, 64<<10)
			buf := make([]byte, 8)
			// run runs one verb's sub-benchmark; the metric goes on the rows (a benchmark with
			// sub-benchmarks reports nothing of its own).
			run := func(name string, bench func(b *testing.B)) {
				b.Run(name, func(b *testing.B) {
					bench(b)
					b.ReportMetric(float64(f.Inject().Nanoseconds()), "inject-ns")
				})
			}
			run("read8", func(b *testing.B) {
				for b.Loop() {
					if err := m.Read(ctx, a, buf); err != nil {
						b.Fatal(err)
					}
				}
			})
			run("write8", func(b *testing.B) {
				for b.Loop() {
					if err := m.Write(ctx, a.Add(64), buf); err != nil {
						b.Fatal(err)
					}
				}
			})
			run("faa", func(b *testing.B) {
				for b.Loop() {
					if _, err := m.FAA(ctx, a.Add(128), 1); err != nil {
						b.Fatal(err)
					}
				}
			})
			run("cas", func(b *testing.B) {
				var v uint64
				for b.Loop() {
					if _, err := m.CAS(ctx, a.Add(192), v, v+1); err != nil {
						b.Fatal(err)
					}
					v++
				}
			})
			run("read4k", func(b *testing.B) {
				big := make([]byte, 4096)
				b.SetBytes(4096)
				for b.Loop() {
					if err := m.Read(ctx, a.Add(4096), big); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkCall measures a Call round trip between two compute nodes of this process, through
// a mailbox of the shared mapping with futex wake-ups.
func BenchmarkCall(b *testing.B) {
	r, err := cxl.Create("", cxl.Options{
		Shape: transport.Shape{MemoryNodes: 1, MemorySize: 1 << 20, ComputeNodes: 2, SliceSize: 4 << 10, SharedSize: 64 << 10},
	})
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.Close() })
	f1, err := r.Attach(cxl.OpenOptions{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = f1.Close() })
	f2, err := r.Attach(cxl.OpenOptions{})
	require.NoError(b, err)
	b.Cleanup(func() { _ = f2.Close() })
	require.NoError(b, f2.Handle(f2.ID(), 1, func(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		return req, nil
	}))
	m, err := f1.Open(context.Background(), f1.ID())
	require.NoError(b, err)
	for _, size := range []int{8, 64 << 10} {
		req := make([]byte, size)
		b.Run(map[int]string{8: "8B", 64 << 10: "64KiB"}[size], func(b *testing.B) {
			for b.Loop() {
				if _, err := m.Call(context.Background(), f2.ID(), 1, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
