// Package racetest is test support for the RACE hash table (ds/race): the random operation mix
// that the table's linearizability checks run, shared by ds/race's own tests and those of its
// replicated index (ds/race/replcheck), and the key and value encodings the mix uses.
//
// A Workload's client draws every choice (key, operation, value length) from its Memory's
// Runtime, so on the simulator a run is a function of the seed. Every operation is recorded in
// a lincheck history against Model, a map from uint64 keys to uint64 values; values are unique
// per write (the client's node id in the high 32 bits, a counter in the low ones), so the
// checker can tell every write apart. Keys are 8-byte big-endian; a value is its 8-byte
// little-endian number padded with a pattern to the drawn length, so the length varies the
// table's block sizes without affecting the check. It costs one table operation per step plus
// the history's record; it allocates the key and value of each step.
package racetest

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
)

// Model is the sequential map that a Workload's histories are checked against.
var Model = lincheck.KV[uint64, uint64]()

// History is a history of a Workload's operations, made with Model.NewHistory.
type History = lincheck.History[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]

// Workload is a random mix of operations over a small key space: of every 100 operations,
// Search are searches, Insert inserts, Update updates, and the rest deletes.
type Workload struct {
	Keys    uint64 // keys 0..Keys-1
	Ops     int    // operations per client
	Search  int    // percent
	Insert  int    // percent
	Update  int    // percent
	MaxVal  int    // values are 8 to 8+MaxVal-1 bytes long
	Unknown int    // a client stops after this many operations of unknown outcome
}

// Client is the client a Workload runs with.
type Client struct {
	Memory farmem.Memory // its node id names the client in the history; its Runtime draws
	Table  *race.Table
	// Killed, if not nil, reports that the test crashed the client on purpose: an operation
	// that then fails with farmem.ErrNodeDown is left open-ended and the client stops.
	Killed *atomic.Bool
	// Searching, if not nil, is set while the client searches.
	Searching *bool
}

// Run performs w's operations with c, recording them in h. A write's value counter starts at
// base+1, so runs of one client over one history with different bases write distinct values.
// It returns the first error that is neither an operation's expected outcome nor
// farmem.ErrNodeDown (while ctx is not done), or nil.
func (w Workload) Run(ctx context.Context, c Client, h *History, base int) error {
	id := uint64(c.Memory.Info().ID)
	rec := h.Client(int(id))
	rng := c.Memory.Runtime().Rand()
	unknown := 0
	for n := range w.Ops {
		k := rng.Uint64N(w.Keys)
		v := id<<32 | uint64(base+n+1)
		body := Val(v, 8+rng.IntN(w.MaxVal))
		p := rng.IntN(100)
		var out lincheck.KVOutput[uint64, uint64]
		var err error
		var op lincheck.Op[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]
		switch {
		case p < w.Search:
			op = rec.Call(Model.Get(k))
			var got []byte
			if c.Searching != nil {
				*c.Searching = true
			}
			got, err = c.Table.Search(ctx, Key(k))
			if c.Searching != nil {
				*c.Searching = false
			}
			switch {
			case errors.Is(err, race.ErrNotFound):
				out, err = Model.Missing(), nil
			case err == nil:
				if len(got) < 8 {
					return errors.New("racetest: short value")
				}
				out = Model.Found(Unval(got))
			}
		case p < w.Search+w.Insert:
			op = rec.Call(Model.Insert(k, v))
			err = c.Table.Insert(ctx, Key(k), body)
			out = Model.OK()
			if errors.Is(err, race.ErrExists) {
				out, err = Model.Exists(), nil
			}
		case p < w.Search+w.Insert+w.Update:
			op = rec.Call(Model.Update(k, v))
			err = c.Table.Update(ctx, Key(k), body)
			out = Model.OK()
			if errors.Is(err, race.ErrNotFound) {
				out, err = Model.Missing(), nil
			}
		default:
			op = rec.Call(Model.Delete(k))
			err = c.Table.Delete(ctx, Key(k))
			out = Model.OK()
			if errors.Is(err, race.ErrNotFound) {
				out, err = Model.Missing(), nil
			}
		}
		if errors.Is(err, farmem.ErrNodeDown) && c.Killed != nil && c.Killed.Load() {
			// The test crashed the client: its operation may or may not have taken effect
			// (a dead client's last operation is open-ended), and it does nothing more.
			op.Unknown()
			return nil
		}
		if op.End(out, err) == lincheck.Unknown {
			unknown++
			if unknown >= w.Unknown {
				return nil
			}
		}
		if err != nil && !errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// Key is key i's encoding: 8 bytes, big-endian.
func Key(i uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, i)
	return b
}

// Val is value v's encoding, n bytes long (at least 8): v little-endian, then a pattern.
func Val(v uint64, n int) []byte {
	b := make([]byte, max(n, 8))
	binary.LittleEndian.PutUint64(b, v)
	for i := 8; i < len(b); i++ {
		b[i] = byte(v) + byte(i)
	}
	return b
}

// Unval decodes a value made by Val; b must be at least 8 bytes long.
func Unval(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
