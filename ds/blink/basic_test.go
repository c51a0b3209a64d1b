package blink_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// ycsbKey is a YCSB-style string key: variable length.
func ycsbKey(i uint64) []byte { return fmt.Appendf(nil, "user%d", i*2654435761%1000003) }

// TestAgainstMap runs random operations on one client over 256-byte lines (many splits, a
// tree three levels or more deep) and compares every answer and full scans with a Go map.
func TestAgainstMap(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 1}}, selcc.Options{LineSize: 256, Frames: 64, Durability: selcc.WriteBackOnRelease})
	c := r.client(t, 0)
	ctx := context.Background()
	want := map[string][]byte{}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 3000 {
		k := ycsbKey(rng.Uint64N(600))
		v := bytes.Repeat([]byte{byte(n)}, 1+rng.IntN(20))
		old, present := want[string(k)]
		switch p := rng.IntN(100); {
		case p < 50:
			err := c.t.Insert(ctx, k, v)
			if present {
				require.ErrorIs(t, err, blink.ErrExists)
			} else {
				require.NoError(t, err)
				want[string(k)] = v
			}
		case p < 65:
			err := c.t.Update(ctx, k, v)
			if present {
				require.NoError(t, err)
				want[string(k)] = v
			} else {
				require.ErrorIs(t, err, blink.ErrNotFound)
			}
		case p < 75:
			err := c.t.Delete(ctx, k)
			if present {
				require.NoError(t, err)
				delete(want, string(k))
			} else {
				require.ErrorIs(t, err, blink.ErrNotFound)
			}
		default:
			got, err := c.t.Get(ctx, k)
			if present {
				require.NoError(t, err)
				require.Equal(t, old, got)
			} else {
				require.ErrorIs(t, err, blink.ErrNotFound)
			}
		}
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ps, err := c.t.Scan(ctx, nil, nil, 0)
	require.NoError(t, err)
	require.Len(t, ps, len(keys))
	for i, p := range ps {
		require.Equal(t, keys[i], string(p.Key))
		require.Equal(t, want[keys[i]], p.Value)
	}
	// Bounded scans with limits.
	from, to := []byte(keys[len(keys)/4]), []byte(keys[len(keys)/2])
	ps, err = c.t.Scan(ctx, from, to, 0)
	require.NoError(t, err)
	require.Len(t, ps, len(keys)/2-len(keys)/4)
	ps, err = c.t.Scan(ctx, from, nil, 7)
	require.NoError(t, err)
	require.Len(t, ps, 7)
	require.Equal(t, from, ps[0].Key)

	// Bad input is an error, not a panic.
	mk, mkv := blink.Limits(256)
	require.ErrorIs(t, c.t.Insert(ctx, nil, []byte("v")), farmem.ErrInvalid)
	require.ErrorIs(t, c.t.Insert(ctx, make([]byte, mk+1), nil), blink.ErrKey)
	require.ErrorIs(t, c.t.Insert(ctx, []byte("k"), make([]byte, mkv)), blink.ErrKey)
	require.NoError(t, c.t.Insert(ctx, []byte("kk"), make([]byte, mkv-2)))
	require.NoError(t, c.t.Close())
	require.NoError(t, c.t.Close())
	_, err = c.t.Get(ctx, []byte("kk"))
	require.ErrorIs(t, err, farmem.ErrClosed)
}

// TestRoundTrips asserts round trips per operation on a warm cache (one compute node, so no
// peer conflicts): a read of cached lines costs none; a write to a leaf held exclusively
// costs its write-back under WriteBackOnRelease and none under WriteBack.
func TestRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		d     selcc.Durability
		write uint64
	}{{selcc.WriteBackOnRelease, 1}, {selcc.WriteBack, 0}} {
		t.Run(fmt.Sprint(tc.d), func(t *testing.T) {
			r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1}}, selcc.Options{LineSize: 512, Frames: 256, Durability: tc.d})
			c := r.client(t, 0)
			ctx := context.Background()
			for i := range uint64(200) {
				require.NoError(t, c.t.Insert(ctx, ycsbKey(i), []byte("value")))
			}
			// Warm: read every key, then write every key once, so each line is held M.
			for i := range uint64(200) {
				_, err := c.t.Get(ctx, ycsbKey(i))
				require.NoError(t, err)
				require.NoError(t, c.t.Update(ctx, ycsbKey(i), []byte("value")))
			}
			cost := func(name string, want uint64, op func() error) {
				before := c.m.Stats()
				require.NoError(t, op())
				d := c.m.Stats().Sub(before)
				require.Equal(t, want, d.RoundTrips, "%s (%v)", name, d)
			}
			k := ycsbKey(77)
			cost("get", 0, func() error { _, err := c.t.Get(ctx, k); return err })
			cost("scan", 0, func() error { _, err := c.t.Scan(ctx, k, nil, 50); return err })
			cost("update", tc.write, func() error { return c.t.Update(ctx, k, []byte("other")) })
			cost("delete", tc.write, func() error { return c.t.Delete(ctx, k) })
			cost("insert", tc.write, func() error { return c.t.Insert(ctx, k, []byte("again")) })
			cost("get missing", 0, func() error {
				if _, err := c.t.Get(ctx, []byte("user-absent")); err == nil {
					return fmt.Errorf("found an absent key")
				}
				return nil
			})
		})
	}
}
