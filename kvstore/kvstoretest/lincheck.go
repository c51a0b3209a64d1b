package kvstoretest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/kvstore"
)

// Model is the map a store's histories are checked against: uint64 keys and values (Workload
// encodes them as byte strings).
var Model = lincheck.KV[uint64, uint64]()

// History is a history of Model's operations.
type History = lincheck.History[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]

// KV is what Workload runs on: a *kvstore.Store or a *kvstore.Session.
type KV interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Insert(ctx context.Context, key, value []byte) error
	Update(ctx context.Context, key, value []byte) error
	Put(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
}

// Workload is a random mix of the five point operations over a small key space, for
// linearizability checks of a store (the history is checked against Model).
type Workload struct {
	// Keys is the key space: keys 0..Keys-1, encoded by Key.
	Keys uint64
	// Ops is the operations each goroutine runs.
	Ops int
	// Get, Insert, Update and Put are percentages; the rest are deletes.
	Get, Insert, Update, Put int
	// MaxVal bounds the value length beyond its first 8 bytes (values are 8 to 8+MaxVal-1
	// bytes; 0 or 1: 8 bytes).
	MaxVal int
	// Unknown: a goroutine stops after this many operations of unknown outcome (a crashed or
	// fenced client; 0: at the first).
	Unknown int
	// Key encodes key i (nil: Key).
	Key func(i uint64) []byte
	// Tolerate reports whether an operation's error is an outcome of the faults a test
	// injects (recorded as an unknown outcome) rather than a failure of the run; errors
	// wrapping farmem.ErrNodeDown always are (nil: only those).
	Tolerate func(error) bool
}

// Key returns the key of index i: "key" and 8 big-endian bytes.
func Key(i uint64) []byte {
	b := make([]byte, 11)
	copy(b, "key")
	binary.BigEndian.PutUint64(b[3:], i)
	return b
}

// Key8 returns an 8-byte key of index i that every index kind takes, Dolphin's hybrid tree's
// included (8 bytes big-endian, nonzero, below 2^63): i+1.
func Key8(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i+1) }

// Val returns a value of n bytes (at least 8) carrying v in its first 8, the rest derived from
// v so that Unval detects a torn or mixed value.
func Val(v uint64, n int) []byte {
	b := make([]byte, max(n, 8))
	binary.LittleEndian.PutUint64(b, v)
	for i := 8; i < len(b); i++ {
		b[i] = byte(v) ^ byte(i)
	}
	return b
}

// Unval returns the v a value of Val carries, checking the rest of it.
func Unval(b []byte) (uint64, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("value of %d bytes", len(b))
	}
	v := binary.LittleEndian.Uint64(b)
	for i := 8; i < len(b); i++ {
		if b[i] != byte(v)^byte(i) {
			return 0, fmt.Errorf("value %d corrupt at byte %d", v, i)
		}
	}
	return v, nil
}

// Run performs w's operations on s as goroutine g, recording them in h: each write's value is
// unique (g in the high bits, a counter in the low ones). It returns early, with nil, once
// Unknown operations had an unknown outcome, and with an error on any failure that is not
// farmem.ErrNodeDown or tolerated (or a value that does not decode).
func (w Workload) Run(ctx context.Context, s KV, g int, rng *rand.Rand, h *History) error {
	keyOf := w.Key
	if keyOf == nil {
		keyOf = Key
	}
	rec := h.Client(g)
	unknown := 0
	for n := range w.Ops {
		k := rng.Uint64N(w.Keys)
		v := uint64(g+1)<<32 | uint64(n+1)
		body := Val(v, 8+rng.IntN(max(1, w.MaxVal)))
		p := rng.IntN(100)
		var (
			op  lincheck.Op[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]
			out = Model.OK()
			err error
		)
		switch {
		case p < w.Get:
			op = rec.Call(Model.Get(k))
			var got []byte
			got, err = s.Get(ctx, keyOf(k))
			if err == nil {
				var x uint64
				if x, err = Unval(got); err != nil {
					return err
				}
				out = Model.Found(x)
			}
		case p < w.Get+w.Insert:
			op = rec.Call(Model.Insert(k, v))
			err = s.Insert(ctx, keyOf(k), body)
		case p < w.Get+w.Insert+w.Update:
			op = rec.Call(Model.Update(k, v))
			err = s.Update(ctx, keyOf(k), body)
		case p < w.Get+w.Insert+w.Update+w.Put:
			op = rec.Call(Model.Put(k, v))
			err = s.Put(ctx, keyOf(k), body)
		default:
			op = rec.Call(Model.Delete(k))
			err = s.Delete(ctx, keyOf(k))
		}
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			out, err = Model.Missing(), nil
		case errors.Is(err, kvstore.ErrExists):
			out, err = Model.Exists(), nil
		}
		if op.End(out, err) == lincheck.Unknown {
			if unknown++; unknown >= w.Unknown {
				return nil
			}
		}
		if err != nil && !errors.Is(err, farmem.ErrNodeDown) && (w.Tolerate == nil || !w.Tolerate(err)) && ctx.Err() == nil {
			return fmt.Errorf("goroutine %d: %w", g, err)
		}
	}
	return nil
}
