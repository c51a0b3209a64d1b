package kvstore_test

import (
	"testing"

	"cmp"
	"context"
	"encoding/binary"
	"errors"

	"github.com/farmem/farmem/sim"

	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// scanKV is what a recorder runs on: a *kvstore.Store or a *kvstore.Session.
type scanKV interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Insert(ctx context.Context, key, value []byte) error
	Update(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
	Scan(ctx context.Context, from, to []byte, limit int) ([]kvstore.Pair, error)
}

// recorder runs one client's operations on a store and records each in a lincheck KV history
// (rec, of the model kv): a key k is the store's key enc(k) (dec reads one back in scans), a
// value v is stored as val(v) and read back from its first eight bytes, little-endian.
// ErrExists and ErrNotFound become the model's answers; each method returns the error left.
type recorder[K cmp.Ordered] struct {
	s   scanKV
	kv  *lincheck.KVModel[K, uint64]
	rec *lincheck.Client[lincheck.KVInput[K, uint64], lincheck.KVOutput[K, uint64]]
	enc func(K) []byte
	dec func([]byte) K
	val func(uint64) []byte
}

// le8 is a value as eight little-endian bytes.
func le8(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func (r recorder[K]) get(ctx context.Context, k K) error {
	op := r.rec.Call(r.kv.Get(k))
	got, err := r.s.Get(ctx, r.enc(k))
	out := r.kv.Missing()
	if err == nil {
		out = r.kv.Found(binary.LittleEndian.Uint64(got))
	} else if errors.Is(err, kvstore.ErrNotFound) {
		err = nil
	}
	op.End(out, err)
	return err
}

func (r recorder[K]) insert(ctx context.Context, k K, v uint64) error {
	op := r.rec.Call(r.kv.Insert(k, v))
	err := r.s.Insert(ctx, r.enc(k), r.val(v))
	out := r.kv.OK()
	if errors.Is(err, kvstore.ErrExists) {
		out, err = r.kv.Exists(), nil
	}
	op.End(out, err)
	return err
}

func (r recorder[K]) update(ctx context.Context, k K, v uint64) error {
	op := r.rec.Call(r.kv.Update(k, v))
	err := r.s.Update(ctx, r.enc(k), r.val(v))
	out := r.kv.OK()
	if errors.Is(err, kvstore.ErrNotFound) {
		out, err = r.kv.Missing(), nil
	}
	op.End(out, err)
	return err
}

func (r recorder[K]) delete(ctx context.Context, k K) error {
	op := r.rec.Call(r.kv.Delete(k))
	err := r.s.Delete(ctx, r.enc(k))
	out := r.kv.OK()
	if errors.Is(err, kvstore.ErrNotFound) {
		out, err = r.kv.Missing(), nil
	}
	op.End(out, err)
	return err
}

// scan records an unlimited scan of [from, to).
func (r recorder[K]) scan(ctx context.Context, from, to K) error {
	op := r.rec.Call(r.kv.Scan(from, to, 0))
	ps, err := r.s.Scan(ctx, r.enc(from), r.enc(to), 0)
	var got []lincheck.Pair[K, uint64]
	for _, p := range ps {
		got = append(got, lincheck.Pair[K, uint64]{Key: r.dec(p.Key), Value: binary.LittleEndian.Uint64(p.Value)})
	}
	op.End(r.kv.Pairs(got), err)
	return err
}

// startSim starts a simulated cluster of model with seed, closed when the test ends
// (kvstoretest.StartSim).
func startSim(t testing.TB, model sim.Model, seed uint64) *sim.Sim {
	t.Helper()
	return kvstoretest.StartSim(t, model, seed)
}

// openSession opens node's Memory on f and a session of s on it (kvstoretest.OpenSession).
var openSession = kvstoretest.OpenSession
