package rdma

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
)

// pipelinedAnswers posts n one-read batches on a queue pair to a node played over a pipe, which
// reads the n requests and answers them all in one write, with answer(i, id) as the frame of
// the i-th (nil: none); it returns the batches' Pendings once the node has written.
func pipelinedAnswers(t *testing.T, n int, answer func(i int, id uint64) []byte) ([]*farmem.Pending, []*farmem.Batch, *tcpQP) {
	t.Helper()
	fab := &Fabric{down: time.Second, log: testLogger(), live: map[*tlink]struct{}{}, opts: Options{MaxOutstanding: 2 * n}}
	fab.ctx = context.Background()
	c := &client{f: fab, qps: map[farmem.NodeID]qp{}}
	c.Init(farmem.ClientInfo{ID: 1}, nil, c.single, c.Post)
	p := newPeer(1, "pipe", 1<<20, nil)
	p.learn(wire.Welcome{Key: 9})
	q := newQP(c, p)
	cli, srv := net.Pipe()
	t.Cleanup(func() { _ = srv.Close() })
	q.attachAsync(cli)
	nodeErr := make(chan error, 1)
	go func() {
		var hdr [wire.HeaderSize]byte
		_ = srv.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(srv)
		var out []byte
		for i := range n {
			h, _, err := wire.ReadFrame(br, &hdr, nil, wire.DefaultMaxFrame)
			if err != nil {
				nodeErr <- err
				return
			}
			out = append(out, answer(i, h.ID)...)
		}
		_, err := srv.Write(out) // every answer in one write: the client reads them together
		nodeErr <- err
	}()
	pends := make([]*farmem.Pending, n)
	batches := make([]*farmem.Batch, n)
	for i := range n {
		batches[i] = &farmem.Batch{}
		batches[i].Read(farmem.MakeAddr(1, uint64(64+8*i)), make([]byte, 8))
		var comp transport.Completer
		pends[i], comp = transport.NewPending(batches[i], transport.NewChanParker())
		q.post(context.Background(), batches[i], nil, &batchSink{c: c, comp: comp})
	}
	require.NoError(t, <-nodeErr)
	t.Cleanup(func() { q.close(farmem.ErrClosed) })
	return pends, batches, q
}

// readAnswer is a Result frame answering request id's read of 8 bytes with val.
func readAnswer(id, val uint64) []byte {
	f, start := wire.BeginFrame(nil, wire.TypeResult, 0, id)
	f = wire.AppendResultCount(f, 1)
	f, dst := wire.AppendRead(f, 8)
	binary.LittleEndian.PutUint64(dst, val)
	return wire.EndFrame(f, start)
}

// TestPipelinedAnswersReadTogether: answers read from the socket together complete each its
// own batch, in order, with its own data.
func TestPipelinedAnswersReadTogether(t *testing.T) {
	const n = 40
	pends, batches, _ := pipelinedAnswers(t, n, func(i int, id uint64) []byte { return readAnswer(id, uint64(1000+i)) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		require.NoError(t, pends[i].Wait(ctx, 0))
		_, err := batches[i].Result(0)
		require.NoError(t, err)
		require.Equal(t, uint64(1000+i), binary.LittleEndian.Uint64(batches[i].Ops[0].Buf), "batch %d", i)
	}
}

// TestPipelinedAnswersBadFrame: among answers read together, one for no outstanding request (or
// malformed) fails the connection: the batches answered before it complete, and every other
// one fails with ErrNodeDown; none is left waiting.
func TestPipelinedAnswersBadFrame(t *testing.T) {
	const n, bad = 12, 5
	for _, tc := range []struct {
		name  string
		frame func(id uint64) []byte
	}{
		{"unknown request", func(id uint64) []byte { return readAnswer(id^(1<<40), 7) }},
		{"malformed results", func(id uint64) []byte {
			f, start := wire.BeginFrame(nil, wire.TypeResult, 0, id)
			return wire.EndFrame(wire.AppendResultCount(f, 3), start) // 3 results, none there
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pends, batches, _ := pipelinedAnswers(t, n, func(i int, id uint64) []byte {
				if i == bad {
					return tc.frame(id)
				}
				return readAnswer(id, uint64(i))
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := range n {
				require.NoError(t, pends[i].Wait(ctx, 0), "batch %d left waiting", i)
				_, err := batches[i].Result(0)
				if i < bad {
					require.NoError(t, err, "batch %d", i)
					require.Equal(t, uint64(i), binary.LittleEndian.Uint64(batches[i].Ops[0].Buf))
					continue
				}
				require.True(t, errors.Is(err, farmem.ErrNodeDown), "batch %d: %v", i, err)
			}
		})
	}
}
