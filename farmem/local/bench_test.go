package local_test

import (
	"context"
	"testing"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// BenchmarkVerb measures the cost of one verb on the local transport with no latency model:
// the transport's own overhead, with which every structure's CPU cost in unit tests is paid.
func BenchmarkVerb(b *testing.B) {
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := f.Open(context.Background(), f.Hosted()[0])
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	a := farmem.MakeAddr(1, 4096)
	buf8, buf64, buf4k := make([]byte, 8), make([]byte, 64), make([]byte, 4096)
	for _, bm := range []struct {
		name string
		fn   func() error
	}{
		{"Read8", func() error { return m.Read(ctx, a, buf8) }},
		{"Read64", func() error { return m.Read(ctx, a, buf64) }},
		{"Read4K", func() error { return m.Read(ctx, a, buf4k) }},
		{"Write8", func() error { return m.Write(ctx, a, buf8) }},
		{"Write4K", func() error { return m.Write(ctx, a, buf4k) }},
		{"CAS", func() error { _, err := m.CAS(ctx, a, 0, 0); return err }},
		{"FAA", func() error { _, err := m.FAA(ctx, a, 1); return err }},
		{"MaskedCAS", func() error { _, err := m.MaskedCAS(ctx, a, 0, 0, 1, 1); return err }},
		{"Batch2Nodes", func() error {
			var bt farmem.Batch
			bt.Read(a, buf8)
			bt.FAA(farmem.MakeAddr(2, 4096), 1)
			return m.Do(ctx, &bt)
		}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bm.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQuorum measures a batch of two ops to each of three memory nodes waited on for a
// quorum of two nodes, then for all: what WaitNodes adds to Post and Wait (it allocates
// nothing).
func BenchmarkQuorum(b *testing.B) {
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := f.Open(context.Background(), f.Hosted()[0])
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var bt farmem.Batch
	buf := make([]byte, 8)
	for n := farmem.NodeID(1); n <= 3; n++ {
		bt.Write(farmem.MakeAddr(n, 4096), buf)
		bt.FAA(farmem.MakeAddr(n, 4104), 1)
	}
	b.Run("PostWait", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := m.Post(ctx, &bt).Wait(ctx, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PostWaitNodes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := m.Post(ctx, &bt)
			if err := p.WaitNodes(ctx, 2); err != nil {
				b.Fatal(err)
			}
			if err := p.Wait(ctx, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
