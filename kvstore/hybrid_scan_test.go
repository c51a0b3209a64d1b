package kvstore_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestHybridIndexScans checks a linearizable history (scans per key) of the store over the
// hybrid tree: clients on two compute nodes insert, update, delete, get and scan keys of two
// adjacent 256-key prefixes (small leaves split, and scans span both prefixes' special nodes,
// answered from the cache or by the walk).
func TestHybridIndexScans(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond})
	s := openStore(t, f, kvstore.Options{Index: kvstore.Hybrid{LeafSlots: 8, CacheBytes: 1 << 16}, Alloc: quietAlloc})
	ctx := context.Background()
	k := func(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
	const base = 0x0100 // keys base+1 .. base+384 span two prefixes
	kv := lincheck.KV[uint64, uint64]()
	h := kv.NewHistory(f.Runtime())
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := recorder[uint64]{s: s, kv: kv, rec: h.Client(c + 1), enc: k, dec: binary.BigEndian.Uint64, val: le8}
			for n := range 250 {
				i := base + 1 + uint64((n*37+c*101)%384)
				v := uint64(c)<<32 | uint64(n+1)
				var err error
				switch n % 6 {
				case 0, 1:
					err = r.insert(ctx, i, v)
				case 2:
					err = r.update(ctx, i, v)
				case 3:
					err = r.delete(ctx, i)
				case 4:
					err = r.get(ctx, i)
				default:
					err = r.scan(ctx, i, i+200)
				}
				if err != nil {
					errs[c] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for c, err := range errs {
		require.NoError(t, err, "client %d", c)
	}
	h.Check(t)
}
