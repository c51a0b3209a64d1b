package nodestate_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/nodestate"
)

// cache is a toy per-node structure: a count of invalidations its node received.
type cache struct {
	node          farmem.NodeID
	invalidations atomic.Int64
	closed        atomic.Int32
}

func (c *cache) Close() error { c.closed.Add(1); return nil }

const invalidate = 1

func openCache(ctx context.Context, env *nodestate.Env) (*cache, error) {
	c := &cache{node: env.Node}
	err := env.Handle(invalidate, func(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		c.invalidations.Add(1)
		// Tell the sender, through a word of its own region it waits on.
		return nil, m.Write(ctx, farmem.Addr(binary.LittleEndian.Uint64(req)), binary.LittleEndian.AppendUint64(nil, 1))
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// A structure outside kvstore opens its per-node state with Open, reaches a node's state with
// Get, and its peers reach the state's handlers with Send (or Call).
func Example() {
	ctx := context.Background()
	f, _ := local.New(local.Options{Shape: local.Shape{ComputeNodes: 2}})
	defer f.Close()
	set, err := nodestate.Open(ctx, f, f.Hosted(), farmem.OwnerSELCC, openCache)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()

	nodes := set.Nodes()
	m, _ := f.Open(ctx, nodes[0])
	defer m.Close()
	flag := m.Info().Slice
	_ = m.Send(ctx, nodes[1], farmem.OwnerSELCC.Method(invalidate), binary.LittleEndian.AppendUint64(nil, uint64(flag)))
	_, _ = m.Wait(ctx, flag, func(v uint64) bool { return v == 1 })
	c, _ := set.Get(nodes[1])
	fmt.Println("invalidations on the second node:", c.invalidations.Load())
	fmt.Println("messages sent:", m.Stats().Messages, "round trips:", m.Stats().RoundTrips)
	// Output:
	// invalidations on the second node: 1
	// messages sent: 1 round trips: 0
}

func TestOpenCloseUnwind(t *testing.T) {
	ctx := context.Background()
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 3}})
	require.NoError(t, err)
	defer f.Close()
	nodes := f.Hosted()

	_, err = nodestate.Open(ctx, f, f.Topology().MemoryNodes(), farmem.OwnerSELCC, openCache)
	require.ErrorIs(t, err, farmem.ErrInvalid, "no compute node")

	// Nodes are opened once each, in ascending order, whatever the list's order and repeats.
	var order []farmem.NodeID
	set, err := nodestate.Open(ctx, f, append([]farmem.NodeID{nodes[2], nodes[0]}, nodes...), farmem.OwnerSELCC,
		func(ctx context.Context, env *nodestate.Env) (*cache, error) {
			order = append(order, env.Node)
			require.Equal(t, env.Node, env.Memory.Info().Node)
			require.Equal(t, farmem.OwnerSELCC, env.Methods)
			require.ErrorIs(t, env.Handle(2, nil), farmem.ErrInvalid)
			return openCache(ctx, env)
		})
	require.NoError(t, err)
	require.Equal(t, nodes, order)
	require.Equal(t, nodes, set.Nodes())
	_, ok := set.Get(f.Topology().MemoryNodes()[0])
	require.False(t, ok)
	var caches []*cache
	for _, n := range nodes {
		c, ok := set.Get(n)
		require.True(t, ok)
		require.Equal(t, n, c.node)
		caches = append(caches, c)
	}
	require.NoError(t, set.Close())
	require.NoError(t, set.Close())
	for _, c := range caches {
		require.Equal(t, int32(1), c.closed.Load(), "closed once")
	}

	// An opener failing on the last node: the others are closed, every handler is removed.
	var opened []*cache
	_, err = nodestate.Open(ctx, f, nodes, farmem.OwnerSELCC, func(ctx context.Context, env *nodestate.Env) (*cache, error) {
		c, err := openCache(ctx, env)
		if err != nil {
			return nil, err
		}
		if env.Node == nodes[2] {
			return nil, errors.New("no room")
		}
		opened = append(opened, c)
		return c, nil
	})
	require.ErrorContains(t, err, "no room")
	require.Len(t, opened, 2)
	for _, c := range opened {
		require.Equal(t, int32(1), c.closed.Load())
	}
	for _, n := range nodes {
		h := func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) { return nil, nil }
		require.NoError(t, f.Handle(n, farmem.OwnerSELCC.Method(invalidate), h), "%v's handler was removed", n)
	}
	// Now the method is taken on every node: a set of the structure cannot open there.
	_, err = nodestate.Open(ctx, f, nodes, farmem.OwnerSELCC, openCache)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	require.ErrorContains(t, err, "ds/selcc.1")
}
