package race_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
)

// A Search of a table without copies takes the straight path and stays on it for the common
// cases: a key present (its buckets, then its block: two round trips) and a key absent (one
// round trip when no slot has its fingerprint, two when one has), with the verbs and bytes of
// the general path (a look counted per Search, nothing repeated) and no hand-over. Searches of
// a replicated table (block copies) take the general path.
func TestSearchStraight(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 64})
	var bb *blockBatches
	c := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		bb = &blockBatches{Memory: m}
		return bb
	})
	const n = 50
	for i := range n {
		require.NoError(t, c.tab.Insert(ctx, key(uint64(i)), val(uint64(i), 100)))
	}
	before, mb := c.tab.Stats(), c.m.Stats()
	for i := range n {
		got, err := c.tab.Search(ctx, key(uint64(i)))
		require.NoError(t, err)
		require.Equal(t, val(uint64(i), 100), got)
	}
	d, md := sub(c.tab.Stats(), before), c.m.Stats().Sub(mb)
	require.EqualValues(t, n, d.SearchStraight, "every Search took the straight path")
	require.Zero(t, d.SearchHandovers)
	require.EqualValues(t, n, d.Lookups)
	require.EqualValues(t, 2*n, md.RoundTrips, "buckets, then the block")
	reads := md.Verbs[farmem.TargetMemory][farmem.OpRead]
	require.True(t, reads >= 3*n && reads <= 4*n,
		"%d reads: in the buckets' batch both buckets (one if they are the same) and the header, one in the block's", reads)

	// Absent keys: with one candidate or none, each answered on the straight path, with no
	// batch of block reads when no slot matches.
	before, mb = c.tab.Stats(), c.m.Stats()
	none := 0
	for i := range n {
		_, err, sizes := bb.search(c.tab, key(uint64(1000+i)))
		require.ErrorIs(t, err, race.ErrNotFound)
		for _, n := range sizes {
			require.NotZero(t, n, "an empty batch")
		}
		if len(sizes) == 0 {
			none++
		}
	}
	require.NotZero(t, none, "every absent key had a candidate")
	d, md = sub(c.tab.Stats(), before), c.m.Stats().Sub(mb)
	require.EqualValues(t, n, d.SearchStraight)
	require.Zero(t, d.SearchHandovers)
	require.EqualValues(t, n, d.Lookups)
	require.GreaterOrEqual(t, md.RoundTrips, uint64(n))

	// AppendSearch appends to the caller's buffer on this path too.
	buf := append(make([]byte, 0, 200), "prefix"...)
	got, err := c.tab.AppendSearch(ctx, buf, key(7))
	require.NoError(t, err)
	require.Equal(t, append([]byte("prefix"), val(7, 100)...), got)

	// Block copies: the general path.
	re := newEnv(t, local.Options{Shape: local.Shape{MemoryNodes: 2}}, race.Params{Replicas: 2})
	rc := re.open(t, 0, race.Options{})
	require.NoError(t, rc.tab.Insert(ctx, key(1), val(1, 100)))
	got, err = rc.tab.Search(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, val(1, 100), got)
	require.Zero(t, rc.tab.Stats().SearchStraight, "a table with block copies searched straight")
}

// sub is a-b for the counts the straight Search tests look at.
func sub(a, b race.Stats) race.Stats {
	return race.Stats{
		Searches: a.Searches - b.Searches, Lookups: a.Lookups - b.Lookups, Refreshes: a.Refreshes - b.Refreshes,
		BadBlocks: a.BadBlocks - b.BadBlocks, PinExpired: a.PinExpired - b.PinExpired, Hops: a.Hops - b.Hops,
		SearchStraight: a.SearchStraight - b.SearchStraight, SearchHandovers: a.SearchHandovers - b.SearchHandovers,
	}
}

// blockBatches is a Memory that records the op counts of the batches of one Search after the
// first (its buckets' batch): the block reads; and, when arm is set, passes each such batch's
// ops to act before it runs (act may fail it: its error is the batch's) or after (post).
type blockBatches struct {
	farmem.Memory
	arm   bool
	seen  int   // batches since arm
	sizes []int // op counts of the batches after the first
	dups  int   // ops of those batches that read an address read already in their batch
	act   func(b *farmem.Batch) error
	post  func(b *farmem.Batch)
}

func (m *blockBatches) Do(ctx context.Context, b *farmem.Batch) error {
	if !m.arm {
		return m.Memory.Do(ctx, b)
	}
	m.seen++
	if m.seen == 1 {
		return m.Memory.Do(ctx, b)
	}
	m.sizes = append(m.sizes, len(b.Ops))
	for i := range b.Ops {
		for j := range i {
			if b.Ops[j].Addr == b.Ops[i].Addr {
				m.dups++
			}
		}
	}
	if m.act != nil {
		if err := m.act(b); err != nil {
			return err
		}
	}
	err := m.Memory.Do(ctx, b)
	if m.post != nil && err == nil {
		m.post(b)
	}
	return err
}

// search runs one Search of k through m armed, and returns its value, error and the op counts
// of its block batches.
func (m *blockBatches) search(tab *race.Table, k []byte) ([]byte, error, []int) {
	m.arm, m.seen, m.sizes = true, 0, nil
	v, err := tab.Search(context.Background(), k)
	m.arm = false
	return v, err, m.sizes
}

// severalEnv is a table with one-bit fingerprints in one bucket group, where most keys have
// several candidates, n keys inserted, and a client on it seen through a blockBatches.
func severalEnv(t *testing.T, n int) (*client, *blockBatches) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 1, SlotsPerBucket: 4, FingerprintBits: 1, MaxDepth: 1})
	var bb *blockBatches
	c := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		bb = &blockBatches{Memory: m}
		return bb
	})
	for i := range n {
		require.NoError(t, c.tab.Insert(ctx, key(uint64(i)), val(uint64(i), 40)))
	}
	return c, bb
}

// With one-bit fingerprints in one bucket group, most keys have several candidates: their
// Searches read every candidate block in one batch on the straight path (searchSeveral), with no
// hand-over and one look each, and find each key.
func TestSearchStraightSeveralCandidates(t *testing.T) {
	const n = 6
	c, bb := severalEnv(t, n)
	before := c.tab.Stats()
	several := 0
	for i := range n {
		got, err, sizes := bb.search(c.tab, key(uint64(i)))
		require.NoError(t, err)
		require.Equal(t, val(uint64(i), 40), got)
		require.Len(t, sizes, 1, "key %d: one batch of block reads", i)
		if sizes[0] > 1 {
			several++
		}
	}
	require.NotZero(t, several, "no Search had several candidates")
	require.Zero(t, bb.dups, "a block read twice in one batch (a slot of both ranges counted twice)")
	d := sub(c.tab.Stats(), before)
	require.EqualValues(t, n, d.SearchStraight)
	require.Zero(t, d.SearchHandovers)
	require.EqualValues(t, n, d.Lookups)
	require.Zero(t, d.Refreshes)
	require.Zero(t, d.BadBlocks)
	// Absent keys with several candidates: ErrNotFound, on the straight path too.
	for i := range 20 {
		_, err, _ := bb.search(c.tab, key(uint64(1000+i)))
		require.ErrorIs(t, err, race.ErrNotFound)
	}
	require.Zero(t, bb.dups, "a block read twice in one batch (a slot of both ranges counted twice)")
	require.Zero(t, c.tab.Stats().SearchHandovers)
}

// A block among several candidates that fails validation makes the Search look again (a
// hand-over), even when another of them holds the key, as the general path's learn does: a bad
// block counted, two looks, the key found.
func TestSearchStraightSeveralStale(t *testing.T) {
	const n = 6
	c, bb := severalEnv(t, n)
	damaged := 0
	for i := range n {
		bb.post = func(b *farmem.Batch) {
			if len(b.Ops) > 1 && bb.seen == 2 {
				damaged++
				b.Ops[len(b.Ops)-1].Buf[24] ^= 0xff // the key's first byte: checksummed
			}
		}
		before := c.tab.Stats()
		got, err, sizes := bb.search(c.tab, key(uint64(i)))
		bb.post = nil
		require.NoError(t, err)
		require.Equal(t, val(uint64(i), 40), got)
		if sizes[0] < 2 {
			continue
		}
		d := sub(c.tab.Stats(), before)
		require.EqualValues(t, 1, d.BadBlocks, "key %d", i)
		require.EqualValues(t, 1, d.SearchHandovers, "key %d", i)
		require.EqualValues(t, 2, d.Lookups, "key %d", i)
	}
	require.NotZero(t, damaged, "no Search had several candidates")
}

// A read among several candidates' that fails because its node is down: the key found among
// the others is the answer; absent from them, the Search fails with the read's error (the key
// may be in the block not read), as the general path's learn answers. A batch that fails
// otherwise fails the Search.
func TestSearchStraightSeveralDown(t *testing.T) {
	const n = 6
	c, bb := severalEnv(t, n)
	down := fmt.Errorf("injected: %w", farmem.ErrNodeDown)
	found, failed := 0, 0
	for i := range n {
		for op := range 4 {
			bb.act = func(b *farmem.Batch) error {
				if len(b.Ops) < 2 || op >= len(b.Ops) {
					return nil
				}
				// The others run; op fails, not run.
				saved := b.Ops
				rest := append(append([]farmem.Op(nil), saved[:op]...), saved[op+1:]...)
				rb := &farmem.Batch{Ops: rest}
				if err := bb.Memory.Do(context.Background(), rb); err != nil {
					return err
				}
				for j := range saved {
					k := j
					if j == op {
						transport.SetResult(&saved[j], 0, down)
						continue
					} else if j > op {
						k = j - 1
					}
					_, rerr := rb.Result(k)
					transport.SetResult(&saved[j], 0, rerr)
				}
				return down
			}
			before := c.tab.Stats()
			got, err, sizes := bb.search(c.tab, key(uint64(i)))
			bb.act = nil
			if sizes[0] < 2 || op >= sizes[0] {
				require.NoError(t, err)
				continue
			}
			if err != nil {
				require.ErrorIs(t, err, down, "key %d, op %d", i, op)
				failed++
			} else {
				require.Equal(t, val(uint64(i), 40), got, "key %d, op %d", i, op)
				found++
			}
			d := sub(c.tab.Stats(), before)
			require.Zero(t, d.SearchHandovers)
			require.EqualValues(t, 1, d.Lookups)
		}
	}
	require.NotZero(t, found, "the key was never found beside a failed read")
	require.NotZero(t, failed, "a failed read never hid the key")

	// Any other failure fails the Search.
	boom := errors.New("injected: not a node down")
	bb.act = func(b *farmem.Batch) error {
		for j := range b.Ops {
			transport.SetResult(&b.Ops[j], 0, boom)
		}
		return boom
	}
	for i := range n {
		_, err, _ := bb.search(c.tab, key(uint64(i)))
		require.ErrorIs(t, err, boom)
	}
	bb.act = nil
}

// A block that fails validation (damaged on its way in, as a block reused under the reader
// would be) is not taken: the Search counts a bad block, hands over, looks again and finds the
// key.
func TestSearchStraightStaleBlock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{})
	var damage atomic.Bool
	c := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			// The block's batch: one read of a whole block.
			if err == nil && len(v.Batch.Ops) == 1 && v.Batch.Ops[0].Kind == farmem.OpRead &&
				len(v.Batch.Ops[0].Buf) >= 64 && damage.CompareAndSwap(true, false) {
				v.Batch.Ops[0].Buf[len(v.Batch.Ops[0].Buf)/2] ^= 0xff
			}
		}}
	})
	require.NoError(t, c.tab.Insert(ctx, key(1), val(1, 200)))
	before := c.tab.Stats()
	damage.Store(true)
	got, err := c.tab.Search(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, val(1, 200), got)
	require.False(t, damage.Load(), "the block was not damaged")
	d := sub(c.tab.Stats(), before)
	require.EqualValues(t, 1, d.BadBlocks)
	require.EqualValues(t, 1, d.SearchStraight)
	require.EqualValues(t, 1, d.SearchHandovers)
	require.EqualValues(t, 2, d.Lookups, "looked again after the bad block")
}

// A handle whose directory cache predates splits reads, on the straight path, a subtable that
// no longer owns the keys it looks for (or is splitting region by region): it hands that view
// over, and the general path refreshes its directory (or hops to the new half) and finds every
// key.
func TestSearchStraightMovedKeys(t *testing.T) {
	for _, pr := range []splitProto{regionSplit, wholeSplit} {
		t.Run(pr.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnvProto(t, local.Options{}, race.Params{Groups: 2, SlotsPerBucket: 4}, pr)
			r := e.open(t, 0, race.Options{})
			w := e.open(t, 1, race.Options{})
			_, err := r.tab.Search(ctx, key(0)) // r's directory: the one subtable
			require.ErrorIs(t, err, race.ErrNotFound)
			const n = 200
			for i := range n {
				require.NoError(t, w.tab.Insert(ctx, key(uint64(i)), val(uint64(i), 20)))
			}
			require.NotZero(t, w.tab.Stats().Splits+w.tab.Stats().Begins, "no split")
			// New values: a key of a region moved by a split still in progress is updated in
			// the new half, while its old slot stays behind in the parent.
			for i := range n {
				require.NoError(t, w.tab.Update(ctx, key(uint64(i)), val(uint64(n+i), 20)))
			}
			before := r.tab.Stats()
			for i := range n {
				got, err := r.tab.Search(ctx, key(uint64(i)))
				require.NoError(t, err, "key %d", i)
				require.Equal(t, val(uint64(n+i), 20), got, "key %d", i)
			}
			d := sub(r.tab.Stats(), before)
			require.EqualValues(t, n, d.SearchStraight)
			require.NotZero(t, d.SearchHandovers)
			require.NotZero(t, d.Refreshes+d.Hops, "the stale directory was never refreshed nor a split hopped")
		})
	}
}

// A failed batch ends the Search with its error, as on the general path: the buckets' read
// (nothing else read), or the block's read (the buckets read once).
func TestSearchStraightFailedBatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{})
	var fail atomic.Int32 // 0 none, else the batch size (ops) to fail once
	boom := fmt.Errorf("injected: %w", farmem.ErrNodeDown)
	c := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		return failMemory{Memory: m, fail: &fail, err: boom}
	})
	require.NoError(t, c.tab.Insert(ctx, key(1), val(1, 200)))
	for _, ops := range []int32{3, 1} {
		before := c.tab.Stats()
		fail.Store(ops)
		_, err := c.tab.Search(ctx, key(1))
		require.ErrorIs(t, err, boom, "failing the %d-op batch", ops)
		require.Zero(t, fail.Load(), "the %d-op batch was not failed", ops)
		d := sub(c.tab.Stats(), before)
		require.EqualValues(t, 1, d.SearchStraight)
		require.Zero(t, d.SearchHandovers)
		require.EqualValues(t, 1, d.Lookups)
		got, err := c.tab.Search(ctx, key(1))
		require.NoError(t, err)
		require.Equal(t, val(1, 200), got)
	}
}

// failMemory is a Memory whose next Do of a batch of *fail ops fails with err, its ops failed
// (their results set) and not run.
type failMemory struct {
	farmem.Memory
	fail *atomic.Int32
	err  error
}

func (m failMemory) Do(ctx context.Context, b *farmem.Batch) error {
	if n := m.fail.Load(); n != 0 && int(n) == len(b.Ops) && m.fail.CompareAndSwap(n, 0) {
		for i := range b.Ops {
			transport.SetResult(&b.Ops[i], 0, m.err)
		}
		return m.err
	}
	return m.Memory.Do(ctx, b)
}

// A Search whose lease ran out while it read (it stalled) does not trust what it read: its
// unpin reports the lapse, and it pins again and searches again, on the straight path again.
func TestSearchStraightLapse(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	ctx := context.Background()
	m := e.memory(t, 0)
	var armed atomic.Bool
	sm := stallMemory{Memory: m, stall: 300 * time.Millisecond, armed: &armed}
	ao := e.ao
	ao.Lease, ao.Refresh = 100*time.Millisecond, 50*time.Millisecond
	tab := e.tableOn(t, sm, ao, race.Options{})
	require.NoError(t, tab.Insert(ctx, key(1), val(1, 100)))
	armed.Store(true)
	before := tab.Stats()
	got, err := tab.Search(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, val(1, 100), got)
	require.False(t, armed.Load(), "the stall happened")
	d := sub(tab.Stats(), before)
	require.EqualValues(t, 1, d.PinExpired, "the lapse was seen")
	require.EqualValues(t, 2, d.SearchStraight, "searched straight again")
	require.EqualValues(t, 2, d.Lookups)
	require.Zero(t, d.SearchHandovers)
}

// Buckets of more than 16 slots (more words than one fingerprint mask covers for both ranges)
// take the straight path through the whole view (decodeView), with the same answers as
// narrower ones (the matches as bits); either way the slot found is the one an address cache
// then reads.
func TestSearchStraightWideBuckets(t *testing.T) {
	ctx := context.Background()
	for _, perB := range []int{4, 8, 16, 17, 64} {
		e := newEnv(t, local.Options{}, race.Params{Groups: 64, SlotsPerBucket: perB, FingerprintBits: 2})
		c := e.open(t, 0, race.Options{})
		const n = 40
		for i := range n {
			require.NoError(t, c.tab.Insert(ctx, key(uint64(i)), val(uint64(i), 30)))
		}
		before := c.tab.Stats()
		for i := range n {
			got, err := c.tab.Search(ctx, key(uint64(i)))
			require.NoError(t, err, "%d slots a bucket, key %d", perB, i)
			require.Equal(t, val(uint64(i), 30), got)
			_, err = c.tab.Search(ctx, key(uint64(1000+i)))
			require.ErrorIs(t, err, race.ErrNotFound)
		}
		d := sub(c.tab.Stats(), before)
		require.EqualValues(t, 2*n, d.SearchStraight)
		require.Zero(t, d.SearchHandovers)
		require.EqualValues(t, 2*n, d.Lookups)
		// The slot found is the one an address cache keeps: the next Search is a hit.
		ac := e.open(t, 1, race.Options{AddressCache: 4 * n, Invalidate: true})
		for range 2 {
			for i := range n {
				got, err := ac.tab.Search(ctx, key(uint64(i)))
				require.NoError(t, err)
				require.Equal(t, val(uint64(i), 30), got)
			}
		}
		require.EqualValues(t, n, ac.tab.Stats().CacheHits, "%d slots a bucket", perB)
		require.Zero(t, ac.tab.Stats().CacheStale)
	}
}
