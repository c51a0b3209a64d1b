package kvstore_test

import (
	"context"
	"encoding/binary"
	"errors"
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
			rec := h.Client(c + 1)
			for n := range 250 {
				i := base + 1 + uint64((n*37+c*101)%384)
				v := uint64(c)<<32 | uint64(n+1)
				var err error
				switch n % 6 {
				case 0, 1:
					op := rec.Call(kv.Insert(i, v))
					err = s.Insert(ctx, k(i), binary.LittleEndian.AppendUint64(nil, v))
					out := kv.OK()
					if errors.Is(err, kvstore.ErrExists) {
						out, err = kv.Exists(), nil
					}
					op.End(out, err)
				case 2:
					op := rec.Call(kv.Update(i, v))
					err = s.Update(ctx, k(i), binary.LittleEndian.AppendUint64(nil, v))
					out := kv.OK()
					if errors.Is(err, kvstore.ErrNotFound) {
						out, err = kv.Missing(), nil
					}
					op.End(out, err)
				case 3:
					op := rec.Call(kv.Delete(i))
					err = s.Delete(ctx, k(i))
					out := kv.OK()
					if errors.Is(err, kvstore.ErrNotFound) {
						out, err = kv.Missing(), nil
					}
					op.End(out, err)
				case 4:
					op := rec.Call(kv.Get(i))
					var got []byte
					got, err = s.Get(ctx, k(i))
					out := kv.Missing()
					if err == nil {
						out = kv.Found(binary.LittleEndian.Uint64(got))
					} else if errors.Is(err, kvstore.ErrNotFound) {
						err = nil
					}
					op.End(out, err)
				default:
					from, to := i, i+200
					op := rec.Call(kv.Scan(from, to, 0))
					var ps []kvstore.Pair
					ps, err = s.Scan(ctx, k(from), k(to), 0)
					var got []lincheck.Pair[uint64, uint64]
					for _, p := range ps {
						got = append(got, lincheck.Pair[uint64, uint64]{Key: binary.BigEndian.Uint64(p.Key), Value: binary.LittleEndian.Uint64(p.Value)})
					}
					op.End(kv.Pairs(got), err)
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
