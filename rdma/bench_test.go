package rdma

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// Benchmarks of the tcp provider against an in-process memory node over loopback TCP.
// cmd/farmemd/bench.sh measures a separate farmemd process beside redis-server.

func benchClient(b *testing.B) farmem.Memory { return benchClientOpts(b, Options{}) }

func benchClientOpts(b *testing.B, opts Options) farmem.Memory {
	_, cl := startServers(b, 1, 16<<20)
	f := dialN(b, cl, 1, opts)[0]
	return openOne(b, f)
}

func BenchmarkRead8(b *testing.B) { benchRead8(b, benchClient(b)) }

// BenchmarkRead8Shared is BenchmarkRead8 for a lone client on a shared connection.
func BenchmarkRead8Shared(b *testing.B) {
	benchRead8(b, benchClientOpts(b, Options{SharedConns: true}))
}

func benchRead8(b *testing.B, m farmem.Memory) {
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	buf := make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Read(ctx, a, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFAA(b *testing.B) {
	m := benchClient(b)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.FAA(ctx, a, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func benchOutstanding(b *testing.B, k int) {
	m := benchClient(b)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	bs := make([]farmem.Batch, k)
	ps := make([]*farmem.Pending, k)
	for i := range bs {
		bs[i].Read(a, make([]byte, 8))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if ps[i] != nil {
			// (b.Fatal rather than require in the timed loop: require's Helper walks the stack)
			if err := ps[i].Wait(ctx, 0); err != nil {
				b.Fatal(err)
			}
		}
		ps[i] = m.Post(ctx, &bs[i])
		i = (i + 1) % k
	}
	for _, p := range ps {
		if p != nil {
			require.NoError(b, p.Wait(ctx, 0))
		}
	}
}

func BenchmarkOutstanding1(b *testing.B)  { benchOutstanding(b, 1) }
func BenchmarkOutstanding8(b *testing.B)  { benchOutstanding(b, 8) }
func BenchmarkOutstanding64(b *testing.B) { benchOutstanding(b, 64) }

// BenchmarkQuorumPost posts a batch of two ops to the node and waits for a quorum of one node,
// then for all: WaitNodes adds no allocation to the post path.
func BenchmarkQuorumPost(b *testing.B) {
	m := benchClient(b)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 64<<10)
	var bt farmem.Batch
	bt.Write(a, make([]byte, 8))
	bt.FAA(a.Add(8), 1)
	b.ReportAllocs()
	for b.Loop() {
		p := m.Post(ctx, &bt)
		// (b.Fatal rather than require in the timed loop, as in benchOutstanding)
		if err := p.WaitNodes(ctx, 1); err != nil {
			b.Fatal(err)
		}
		if err := p.Wait(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
}
