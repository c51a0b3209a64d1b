package kvstore_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestHybridSyncCosts counts one uncontended Update of a present key on the hybrid kind
// exactly, warm cache, through a session: round trips and memory-node verbs by kind, under
// each synchronizer the matrix allows (CIDER forced pessimistic as on a hot key, and as it
// routes a cold key), as kvstore/hybrid_sync.go's table states.
func TestHybridSyncCosts(t *testing.T) {
	t.Parallel()
	type cost struct{ rtt, read, write, cas, mcas, faa uint64 }
	for _, c := range []struct {
		name string
		sync kvstore.Sync
		want cost
	}{
		// [Spear FAA, leaf head and keys, values, block WRITE]; [CAS, release FAA unsignaled].
		{"optimistic", kvstore.Optimistic, cost{2, 2, 1, 1, 0, 2}},
		{"cider, cold key", kvstore.CIDER(cider.Options{}), cost{2, 2, 1, 1, 0, 2}},
		// [FAA, leaf]; MaskedCAS enqueue; [block WRITE, CAS]; CAS release.
		{"cider, hot key", kvstore.CIDER(cider.Options{Mode: cider.AlwaysPessimistic}), cost{4, 2, 1, 2, 1, 2}},
		// [FAA, leaf, WRITE]; MaskedCAS enqueue; CAS; CAS release.
		{"mcs", kvstore.MCS(qlock.Options{}), cost{4, 2, 1, 2, 1, 2}},
		// [FAA, leaf, WRITE]; [lock CAS, value word read]; CAS; CAS unlock.
		{"spin", kvstore.Spin(cider.SpinOptions{}), cost{4, 3, 1, 3, 0, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newLocal(t, local.Options{Shape: local.Shape{ComputeNodes: 1}})
			s := openStore(t, f, kvstore.Options{Index: kvstore.Hybrid{CacheBytes: 1 << 20}, Sync: c.sync, Alloc: quietAlloc})
			ctx := context.Background()
			ss, err := s.Session(ctx)
			require.NoError(t, err)
			defer ss.Close()
			k := binary.BigEndian.AppendUint64(nil, 0x0102030405060701)
			require.NoError(t, ss.Insert(ctx, k, make([]byte, 100)))
			require.NoError(t, ss.Update(ctx, k, make([]byte, 100))) // warm the cache
			before := ss.Stats()
			require.NoError(t, ss.Update(ctx, k, []byte("a new value")))
			d := ss.Stats().Sub(before)
			v := d.Verbs[farmem.TargetMemory]
			got := cost{d.RoundTrips, v[farmem.OpRead], v[farmem.OpWrite], v[farmem.OpCAS], v[farmem.OpMaskedCAS], v[farmem.OpFAA]}
			t.Logf("%s: %+v (%v)", c.name, got, d)
			require.Equal(t, c.want, got)
			got2, err := ss.Get(ctx, k)
			require.NoError(t, err)
			require.Equal(t, "a new value", string(got2))
		})
	}
}
