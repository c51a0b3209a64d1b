package kvstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/nodestate"
	"github.com/farmem/farmem/kvstore"
)

// toyKind is RACE with per-node state: each node's state counts the handles opened on it and
// serves a Call (whoami: its node id) and a message (note: it writes 1 at the address the
// message carries).
type toyKind struct {
	kvstore.Race
	failOn farmem.NodeID // OpenNode fails there, after registering its handlers

	mu     sync.Mutex
	states map[farmem.NodeID]*toyState
	opens  int
}

type toyState struct {
	node    farmem.NodeID
	mem     farmem.Memory
	handles atomic.Int32
	notes   atomic.Int32
	closes  atomic.Int32
}

func (s *toyState) Close() error { s.closes.Add(1); return nil }

const (
	toyWhoami = 1
	toyNote   = 2
)

func (k *toyKind) Methods() farmem.MethodOwner { return farmem.OwnerApp }

func (k *toyKind) OpenNode(ctx context.Context, env *nodestate.Env) (nodestate.State, error) {
	if env.Memory.Info().Node != env.Node {
		return nil, fmt.Errorf("env client on %v, not %v", env.Memory.Info().Node, env.Node)
	}
	st := &toyState{node: env.Node, mem: env.Memory}
	k.mu.Lock()
	k.opens++
	if k.states == nil {
		k.states = map[farmem.NodeID]*toyState{}
	}
	k.states[env.Node] = st
	k.mu.Unlock()
	if err := env.Handle(toyWhoami, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return binary.LittleEndian.AppendUint16(nil, uint16(st.node)), nil
	}); err != nil {
		return nil, err
	}
	if err := env.Handle(toyNote, func(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		st.notes.Add(1)
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, 1)
		return nil, m.Write(ctx, farmem.Addr(binary.LittleEndian.Uint64(req)), b)
	}); err != nil {
		return nil, err
	}
	if env.Node == k.failOn {
		return nil, errors.New("toy: refused")
	}
	return st, nil
}

func (k *toyKind) Open(ctx context.Context, env kvstore.IndexEnv, root farmem.Addr) (kvstore.Index, error) {
	st, ok := env.Node.(*toyState)
	if !ok || st.node != env.Memory.Info().Node {
		return nil, fmt.Errorf("handle on %v got node state %v", env.Memory.Info().Node, env.Node)
	}
	st.handles.Add(1)
	return k.Race.Open(ctx, env, root)
}

func (k *toyKind) state(n farmem.NodeID) *toyState {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.states[n]
}

func TestNodeKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2, MemorySize: 8 << 20}})
	nodes := f.Hosted()
	require.Len(t, nodes, 2)
	k := &toyKind{}
	s, err := kvstore.Open(ctx, f, kvstore.Options{Index: k, Alloc: quietAlloc})
	require.NoError(t, err)
	require.Equal(t, 2, k.opens, "one state per hosted compute node")

	// Every handle of a node reaches that node's state.
	ms := make([]farmem.Memory, 2)
	for i, n := range nodes {
		m, err := f.Open(ctx, n)
		require.NoError(t, err)
		defer m.Close()
		ms[i] = m
		before := k.state(n).handles.Load()
		ss, err := s.SessionOn(ctx, m)
		require.NoError(t, err)
		require.NoError(t, ss.Insert(ctx, key(uint64(i)), val(uint64(i), 8)))
		require.NoError(t, ss.Close())
		require.Greater(t, k.state(n).handles.Load(), before, "a session on %v opened its handle with that node's state", n)
	}
	for i := range 20 {
		require.NoError(t, s.Put(ctx, key(uint64(100+i)), val(1, 8)))
	}
	require.Equal(t, 2, k.opens, "handles do not open node state again")

	// The other compute node's clients reach a node's handlers by Call and by Send.
	reply, err := ms[0].Call(ctx, nodes[1], farmem.OwnerApp.Method(toyWhoami), nil)
	require.NoError(t, err)
	require.Equal(t, uint16(nodes[1]), binary.LittleEndian.Uint16(reply))
	flag := ms[0].Info().Slice.Add(64)
	req := binary.LittleEndian.AppendUint64(nil, uint64(flag))
	require.NoError(t, ms[0].Send(ctx, nodes[1], farmem.OwnerApp.Method(toyNote), req))
	_, err = ms[0].Wait(ctx, flag, func(v uint64) bool { return v == 1 })
	require.NoError(t, err)
	require.Equal(t, int32(1), k.state(nodes[1]).notes.Load())
	require.Zero(t, k.state(nodes[0]).notes.Load())

	// A second store of the kind on the same nodes collides on the method ids.
	_, err = kvstore.Open(ctx, f, kvstore.Options{Index: &toyKind{}, Alloc: quietAlloc})
	require.ErrorIs(t, err, farmem.ErrInvalid)
	require.ErrorContains(t, err, "already has a handler")
	for _, n := range nodes {
		require.Zero(t, k.state(n).closes.Load(), "the failed second Open left the first store's state alone")
	}

	// Close closes each state once and removes its handlers; a second Close does nothing.
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	for _, n := range nodes {
		require.Equal(t, int32(1), k.state(n).closes.Load(), "state on %v closed once", n)
		err := k.state(n).mem.Read(ctx, flag, make([]byte, 8))
		require.ErrorIs(t, err, farmem.ErrClosed, "the state's client is closed with it")
	}
	_, err = ms[0].Call(ctx, nodes[1], farmem.OwnerApp.Method(toyWhoami), nil)
	require.ErrorIs(t, err, farmem.ErrNoHandler)
}

func TestNodeKindUnwinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2, MemorySize: 8 << 20}})
	nodes := f.Hosted()
	k := &toyKind{failOn: nodes[1]}
	_, err := kvstore.Open(ctx, f, kvstore.Options{Index: k, Alloc: quietAlloc})
	require.ErrorContains(t, err, "toy: refused")
	require.Equal(t, 2, k.opens)
	require.Equal(t, int32(1), k.state(nodes[0]).closes.Load(), "the state opened before the failure is closed")
	require.Zero(t, k.state(nodes[1]).closes.Load(), "the failed OpenNode's own state was never returned")
	for _, n := range nodes {
		err := k.state(n).mem.Read(ctx, farmem.MakeAddr(n, 4096), make([]byte, 8))
		require.ErrorIs(t, err, farmem.ErrClosed, "%v's client is closed", n)
	}
	// Every handler is gone, the failing node's included: a store of a working kind opens.
	k2 := &toyKind{}
	s, err := kvstore.Open(ctx, f, kvstore.Options{Index: k2, Alloc: quietAlloc})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for _, n := range nodes {
		require.Equal(t, int32(1), k2.state(n).closes.Load())
	}
}
