package lincheck_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
)

// The structures under test are small concurrent things in far memory, built on local's verbs,
// each with a deliberately broken twin. Their data lives on memory node 1 past its first 64 KiB.

var dataBase = farmem.MakeAddr(1, 1<<16)

func fabric(t *testing.T, o local.Options) *local.Fabric {
	t.Helper()
	f, err := local.New(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// racy are options that make concurrent operations interleave: jitter on every batch, tears
// in long reads, and strict mode so the structures keep atomics and plain writes apart.
var racy = local.Options{Jitter: 3 * time.Microsecond, Tearing: true, Strict: true}

// clients runs n clients concurrently, each with its own Memory and random source.
func clients(t *testing.T, f *local.Fabric, n int, body func(m farmem.Memory, rng *rand.Rand)) {
	t.Helper()
	node := f.Hosted()[0]
	ms := make([]farmem.Memory, n)
	for i := range ms {
		m, err := f.Open(context.Background(), node)
		require.NoError(t, err)
		ms[i] = m
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer m.Close()
			body(m, m.Runtime().Rand())
		}()
	}
	wg.Wait()
	require.Zero(t, f.Violations(), "strict mode: a plain write overlapped an atomic word")
}

func load(ctx context.Context, m farmem.Memory, a farmem.Addr) (uint64, error) {
	var b [8]byte
	err := m.Read(ctx, a, b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

// store writes an atomic word (a word atomics use must be written by atomics only).
func store(ctx context.Context, m farmem.Memory, a farmem.Addr, v uint64) error {
	_, err := m.MaskedCAS(ctx, a, 0, 0, v, ^uint64(0))
	return err
}

// farRegister is one word per key. The broken one does CAS as read, compare, write: two
// clients can both succeed from the same value, and one update is lost.
type farRegister struct{ brokenCAS bool }

func (farRegister) addr(key uint64) farmem.Addr { return dataBase + farmem.Addr(8*key) }

func (r farRegister) cas(ctx context.Context, m farmem.Memory, key, old, v uint64) (bool, error) {
	if !r.brokenCAS {
		prev, err := m.CAS(ctx, r.addr(key), old, v)
		return prev == old, err
	}
	cur, err := load(ctx, m, r.addr(key))
	if err != nil || cur != old {
		return false, err
	}
	return true, store(ctx, m, r.addr(key), v)
}

// registerRound runs clients doing reads, writes and CASes on keys registers and returns the
// history.
func registerRound(t *testing.T, r farRegister, nclients, ops int, keys uint64) *lincheck.History[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]] {
	f := fabric(t, racy)
	reg := lincheck.Register[uint64]()
	h := reg.NewHistory(f.Runtime())
	clients(t, f, nclients, func(m farmem.Memory, rng *rand.Rand) {
		ctx := context.Background()
		c := h.Client(int(m.Info().ID))
		for i := range ops {
			k := rng.Uint64N(keys)
			v := uint64(m.Info().ID)<<32 | uint64(i+1)
			switch rng.IntN(4) {
			case 0:
				op := c.Call(reg.Read(k))
				got, err := load(ctx, m, r.addr(k))
				op.End(reg.Value(got), err)
			case 1:
				op := c.Call(reg.Write(k, v))
				op.End(reg.Ack(), store(ctx, m, r.addr(k), v))
			default:
				// CAS from the value just read: contended, as a CAS loop would be.
				cur, err := load(ctx, m, r.addr(k))
				require.NoError(t, err)
				op := c.Call(reg.CAS(k, cur, v))
				ok, err := r.cas(ctx, m, k, cur, v)
				op.End(reg.Swapped(ok), err)
			}
		}
	})
	return h
}

// catches runs round until its history fails the check, at most rounds times.
func catches[I, O any](t *testing.T, rounds int, round func() *lincheck.History[I, O]) *lincheck.Violation {
	t.Helper()
	for i := range rounds {
		_, err := round().Verify(lincheck.VisualizeDir(t.TempDir()))
		if err == nil {
			continue
		}
		require.ErrorIs(t, err, lincheck.ErrNotLinearizable)
		var v *lincheck.Violation
		require.ErrorAs(t, err, &v)
		t.Logf("caught in round %d:\n%v", i+1, err)
		return v
	}
	require.FailNow(t, "the broken structure passed every round")
	return nil
}

func TestFarRegister(t *testing.T) {
	for range 3 {
		s := registerRound(t, farRegister{}, 4, 300, 2).Check(t)
		require.Equal(t, 1200, s.OK)
	}
}

func TestFarRegisterLostUpdateFails(t *testing.T) {
	v := catches(t, 20, func() *lincheck.History[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]] {
		return registerRound(t, farRegister{brokenCAS: true}, 4, 300, 1)
	})
	require.Contains(t, v.Report, "cas(")
}

// farKV keeps key k (0 <= k < 64) in one word: 0 when absent, 1<<63|value when present. Every
// operation is one atomic on that word (or a CAS loop), so it is linearizable per key. A scan
// reads the words of its range in one long read, which tears between words, or with leaves set
// one read per key, as a tree scan reads leaf after leaf: either way scans are per-key but not
// atomic. The stale variant caches what each client last read or wrote and answers gets from
// that cache.
type farKV struct {
	stale  bool
	leaves bool
	cache  map[farmem.ClientID]map[uint64]uint64
	mu     sync.Mutex
}

const present = 1 << 63

func (kv *farKV) addr(k uint64) farmem.Addr { return dataBase + farmem.Addr(8*k) }

func (kv *farKV) remember(m farmem.Memory, k, w uint64) {
	if !kv.stale {
		return
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.cache == nil {
		kv.cache = make(map[farmem.ClientID]map[uint64]uint64)
	}
	c := kv.cache[m.Info().ID]
	if c == nil {
		c = make(map[uint64]uint64)
		kv.cache[m.Info().ID] = c
	}
	c[k] = w
}

func (kv *farKV) cached(m farmem.Memory, k uint64) (uint64, bool) {
	if !kv.stale {
		return 0, false
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	w, ok := kv.cache[m.Info().ID][k]
	return w, ok
}

func (kv *farKV) get(ctx context.Context, m farmem.Memory, k uint64) (uint64, bool, error) {
	w, ok := kv.cached(m, k)
	if !ok {
		var err error
		if w, err = load(ctx, m, kv.addr(k)); err != nil {
			return 0, false, err
		}
		kv.remember(m, k, w)
	}
	return w &^ present, w != 0, nil
}

func (kv *farKV) put(ctx context.Context, m farmem.Memory, k, v uint64) error {
	kv.remember(m, k, present|v)
	return store(ctx, m, kv.addr(k), present|v)
}

func (kv *farKV) insert(ctx context.Context, m farmem.Memory, k, v uint64) (bool, error) {
	prev, err := m.CAS(ctx, kv.addr(k), 0, present|v)
	return prev == 0, err
}

// change replaces a present key's word by next(word); it reports false if the key is absent.
func (kv *farKV) change(ctx context.Context, m farmem.Memory, k uint64, w uint64) (bool, error) {
	cur, err := load(ctx, m, kv.addr(k))
	for err == nil {
		if cur == 0 {
			return false, nil
		}
		var prev uint64
		if prev, err = m.CAS(ctx, kv.addr(k), cur, w); err == nil && prev == cur {
			return true, nil
		}
		cur = prev
	}
	return false, err
}

func (kv *farKV) scan(ctx context.Context, m farmem.Memory, lo, hi uint64) ([]lincheck.Pair[uint64, uint64], error) {
	buf := make([]byte, 8*(hi-lo))
	if !kv.leaves {
		if err := m.Read(ctx, kv.addr(lo), buf); err != nil {
			return nil, err
		}
	}
	for i := range hi - lo {
		if !kv.leaves {
			break
		}
		if err := m.Read(ctx, kv.addr(lo+i), buf[8*i:8*i+8]); err != nil {
			return nil, err
		}
	}
	var ps []lincheck.Pair[uint64, uint64]
	for i := range hi - lo {
		if w := binary.LittleEndian.Uint64(buf[8*i:]); w != 0 {
			ps = append(ps, lincheck.Pair[uint64, uint64]{Key: lo + i, Value: w &^ present})
		}
	}
	return ps, nil
}

type kvHistory = lincheck.History[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]

// kvRound runs clients doing every map operation (scans if scans) on keys keys.
func kvRound(t *testing.T, store *farKV, model *lincheck.KVModel[uint64, uint64], nclients, ops int, keys uint64, scans bool) *kvHistory {
	f := fabric(t, racy)
	h := model.NewHistory(f.Runtime())
	clients(t, f, nclients, func(m farmem.Memory, rng *rand.Rand) {
		ctx := context.Background()
		c := h.Client(int(m.Info().ID))
		for i := range ops {
			k := rng.Uint64N(keys)
			v := uint64(m.Info().ID)<<32 | uint64(i+1)
			n := 6
			if scans {
				n = 7
			}
			switch rng.IntN(n) {
			case 0, 1:
				op := c.Call(model.Get(k))
				got, ok, err := store.get(ctx, m, k)
				out := model.Found(got)
				if !ok {
					out = model.Missing()
				}
				op.End(out, err)
			case 2:
				op := c.Call(model.Put(k, v))
				op.End(model.OK(), store.put(ctx, m, k, v))
			case 3:
				op := c.Call(model.Insert(k, v))
				ok, err := store.insert(ctx, m, k, v)
				out := model.OK()
				if !ok {
					out = model.Exists()
				}
				op.End(out, err)
			case 4:
				op := c.Call(model.Update(k, v))
				ok, err := store.change(ctx, m, k, present|v)
				out := model.OK()
				if !ok {
					out = model.Missing()
				}
				op.End(out, err)
			case 5:
				op := c.Call(model.Delete(k))
				ok, err := store.change(ctx, m, k, 0)
				out := model.OK()
				if !ok {
					out = model.Missing()
				}
				op.End(out, err)
			case 6:
				lo := rng.Uint64N(keys)
				hi := lo + 1 + rng.Uint64N(keys-lo)
				op := c.Call(model.Scan(lo, hi, 0))
				ps, err := store.scan(ctx, m, lo, hi)
				op.End(model.Pairs(ps), err)
			}
		}
	})
	return h
}

func TestFarKV(t *testing.T) {
	kv := lincheck.KV[uint64, uint64]()
	for range 3 {
		kvRound(t, &farKV{}, kv, 4, 400, 8, true).Check(t)
	}
}

func TestFarKVStaleValueFails(t *testing.T) {
	kv := lincheck.KV[uint64, uint64]()
	v := catches(t, 10, func() *kvHistory { return kvRound(t, &farKV{stale: true}, kv, 4, 200, 4, false) })
	require.Contains(t, v.Report, "get(")
}

// Scans that read leaf after leaf meet the per-key scan specification, and the atomic one
// catches that they are not atomic: a writer sweeps the keys in ascending order while scanners
// read them in ascending order, so a scan can see a key's old value and a later key's new one.
func TestFarKVScansAreNotAtomic(t *testing.T) {
	at := lincheck.KVAtomicScans[uint64, uint64]()
	kv := lincheck.KV[uint64, uint64]()
	const keys = 3
	store := &farKV{leaves: true}
	v := catches(t, 20, func() *kvHistory {
		f := fabric(t, racy)
		h := at.NewHistory(f.Runtime())
		clients(t, f, 3, func(m farmem.Memory, _ *rand.Rand) {
			ctx := context.Background()
			c := h.Client(int(m.Info().ID))
			for i := range uint64(100) {
				if m.Info().Slot == 0 {
					for k := range uint64(keys) {
						op := c.Call(at.Put(k, i))
						op.End(at.OK(), store.put(ctx, m, k, i))
					}
					continue
				}
				op := c.Call(at.Scan(0, keys, 0))
				ps, err := store.scan(ctx, m, 0, keys)
				op.End(at.Pairs(ps), err)
			}
		})
		// The same history passes the per-key specification.
		per := kv.NewHistory(nil)
		per.Add(h.Records()...)
		per.Check(t)
		return h
	})
	require.Equal(t, "keys [0, 3)", v.Partition)
	// Leaf-by-leaf scans in a random workload pass the per-key specification.
	kvRound(t, store, kv, 4, 300, 8, true).Check(t)
}

// farMax is a max register in one word per key. Correct: a CAS loop that only raises. Broken:
// read, compare, then store, so a racing smaller write can land after a larger one.
type farMax struct{ broken bool }

func (farMax) addr(k uint64) farmem.Addr { return dataBase + farmem.Addr(8*k) }

func (r farMax) write(ctx context.Context, m farmem.Memory, k, v uint64) error {
	cur, err := load(ctx, m, r.addr(k))
	for err == nil && cur < v {
		if r.broken {
			return store(ctx, m, r.addr(k), v)
		}
		var prev uint64
		if prev, err = m.CAS(ctx, r.addr(k), cur, v); prev == cur {
			return err
		}
		cur = prev
	}
	return err
}

func maxRound(t *testing.T, r farMax, nclients, ops int) *lincheck.History[lincheck.MaxInput[uint64], uint64] {
	f := fabric(t, racy)
	mr := lincheck.MaxRegister(cmp.Compare[uint64])
	h := mr.NewHistory(f.Runtime())
	clients(t, f, nclients, func(m farmem.Memory, rng *rand.Rand) {
		ctx := context.Background()
		c := h.Client(int(m.Info().ID))
		for i := range ops {
			if rng.IntN(2) == 0 {
				op := c.Call(mr.Read(0))
				v, err := load(ctx, m, r.addr(0))
				op.End(v, err)
				continue
			}
			// Values grow slowly with noise, so writes often race with larger ones.
			v := uint64(i) + rng.Uint64N(20)
			op := c.Call(mr.Write(0, v))
			op.End(0, r.write(ctx, m, 0, v))
		}
	})
	return h
}

func TestFarMaxRegister(t *testing.T) {
	for range 3 {
		maxRound(t, farMax{}, 4, 300).Check(t)
	}
}

func TestFarMaxRegisterBackwardsFails(t *testing.T) {
	v := catches(t, 20, func() *lincheck.History[lincheck.MaxInput[uint64], uint64] {
		return maxRound(t, farMax{broken: true}, 4, 300)
	})
	require.Contains(t, v.Report, "read(0)")
}

// farSet is a set of 0..63 in one word: add and remove are masked CASes on the element's bit.
func TestFarSet(t *testing.T) {
	f := fabric(t, racy)
	s := lincheck.Set[uint64]()
	h := s.NewHistory(f.Runtime())
	clients(t, f, 4, func(m farmem.Memory, rng *rand.Rand) {
		ctx := context.Background()
		c := h.Client(int(m.Info().ID))
		for range 300 {
			e := rng.Uint64N(6)
			bit := uint64(1) << e
			switch rng.IntN(3) {
			case 0:
				op := c.Call(s.Add(e))
				prev, err := m.MaskedCAS(ctx, dataBase, 0, 0, bit, bit)
				op.End(prev&bit == 0, err)
			case 1:
				op := c.Call(s.Remove(e))
				prev, err := m.MaskedCAS(ctx, dataBase, 0, 0, 0, bit)
				op.End(prev&bit != 0, err)
			default:
				op := c.Call(s.Contains(e))
				w, err := load(ctx, m, dataBase)
				op.End(w&bit != 0, err)
			}
		}
	})
	sum := h.Check(t)
	require.Equal(t, 6, sum.Partitions)
}

// A counter incremented with FAA is linearizable; one incremented with read then write loses
// updates (as a broken lock around such a critical section would).
func TestFarCounter(t *testing.T) {
	cm := lincheck.Counter()
	round := func(broken bool) *lincheck.History[lincheck.CounterInput, uint64] {
		f := fabric(t, racy)
		h := cm.NewHistory(f.Runtime())
		clients(t, f, 4, func(m farmem.Memory, rng *rand.Rand) {
			ctx := context.Background()
			c := h.Client(int(m.Info().ID))
			for range 200 {
				if rng.IntN(4) == 0 {
					op := c.Call(cm.Read(0))
					v, err := load(ctx, m, dataBase)
					op.End(v, err)
					continue
				}
				op := c.Call(cm.Add(0, 1))
				if !broken {
					prev, err := m.FAA(ctx, dataBase, 1)
					op.End(prev, err)
					continue
				}
				prev, err := load(ctx, m, dataBase)
				if err == nil {
					err = store(ctx, m, dataBase, prev+1)
				}
				op.End(prev, err)
			}
		})
		return h
	}
	round(false).Check(t)
	catches(t, 20, func() *lincheck.History[lincheck.CounterInput, uint64] { return round(true) })
}

// A history can be checked while its clients run: operations in flight count as unknown.
func TestCheckWhileRunning(t *testing.T) {
	f := fabric(t, racy)
	reg := lincheck.Register[uint64]()
	h := reg.NewHistory(f.Runtime())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		clients(t, f, 2, func(m farmem.Memory, rng *rand.Rand) {
			c := h.Client(int(m.Info().ID))
			for i := uint64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				op := c.Call(reg.Write(0, i))
				op.End(reg.Ack(), store(context.Background(), m, dataBase, i))
				op = c.Call(reg.Read(0))
				v, err := load(context.Background(), m, dataBase)
				op.End(reg.Value(v), err)
			}
		})
	}()
	for range 3 {
		time.Sleep(5 * time.Millisecond)
		_, err := h.Verify()
		require.NoError(t, err)
	}
	close(stop)
	<-done
	h.Check(t)
}
