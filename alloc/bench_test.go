package alloc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// BenchmarkAlloc allocates 64-byte blocks that are never freed: the cost includes the chunk
// claims, reported as verbs per allocation (counted by the client's Stats).
func BenchmarkAlloc(b *testing.B) {
	ctx := context.Background()
	const perCluster = 1 << 20 // 64 MiB of blocks, in a 128 MiB node
	var f *local.Fabric
	var m farmem.Memory
	var a *Allocator
	var verbs uint64
	done := func() {
		verbs += m.Stats().TotalVerbs()
		_ = f.Close()
	}
	for i := range b.N {
		if i%perCluster == 0 {
			b.StopTimer()
			if f != nil {
				done()
			}
			var err error
			f, err = local.New(local.Options{Shape: local.Shape{MemorySize: 128 << 20}})
			require.NoError(b, err)
			m, err = f.Open(ctx, f.Hosted()[0])
			require.NoError(b, err)
			require.NoError(b, FormatAll(ctx, m, FormatOptions{}))
			a, err = New(ctx, m, Options{})
			require.NoError(b, err)
			verbs -= m.Stats().TotalVerbs()
			b.StartTimer()
		}
		if _, err := a.Alloc(ctx, 64, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	done()
	b.ReportMetric(float64(verbs)/float64(b.N), "verbs/alloc")
}

// BenchmarkAllocFree allocates and frees a 64-byte block: the free-list path.
func BenchmarkAllocFree(b *testing.B) {
	ctx := context.Background()
	c := newCluster(b, local.Options{}, FormatOptions{})
	a, _ := c.allocator(b, 0, Options{})
	b.ResetTimer()
	for range b.N {
		p, err := a.Alloc(ctx, 64, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(p, 64); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPinUnpin pins and unpins with the default Refresh: mostly local, with an
// announcement every 10ms, reported as verbs per pin.
func BenchmarkPinUnpin(b *testing.B) {
	ctx := context.Background()
	c := newCluster(b, local.Options{}, FormatOptions{})
	a, m := c.allocator(b, 0, Options{})
	s := m.Stats()
	b.ResetTimer()
	for range b.N {
		if err := a.Pin(ctx); err != nil {
			b.Fatal(err)
		}
		if err := a.Unpin(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(m.Stats().Sub(s).TotalVerbs())/float64(b.N), "verbs/pin")
}

// BenchmarkReplace is a store's update as the allocator sees it: a lone writer pins, allocates
// a 1 KiB block, retires the one it replaces and unpins, over 1000 keys, so that its retired
// blocks come back through the backlog scans and the magazine. It reports the chunks claimed
// per update (0 in the steady state).
func BenchmarkReplace(b *testing.B) {
	ctx := context.Background()
	c := newCluster(b, local.Options{}, FormatOptions{})
	a, _ := c.allocator(b, 0, Options{})
	const keys, size = 1000, 1024
	cur := make([]farmem.Addr, keys)
	for k := range cur {
		p, err := a.Alloc(ctx, size, 64)
		require.NoError(b, err)
		cur[k] = p
	}
	chunks := a.Stats().Chunks
	b.ResetTimer()
	for i := range b.N {
		k := i % keys
		at, err := a.PinCoarse(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p, err := a.Alloc(ctx, size, 64)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.RetireAt(ctx, cur[k], size, at); err != nil {
			b.Fatal(err)
		}
		cur[k] = p
		if err := a.UnpinSeen(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(a.Stats().Chunks-chunks)/float64(b.N), "chunks/op")
}
