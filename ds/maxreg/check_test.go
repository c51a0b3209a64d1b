package maxreg_test

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
)

// The register's specification is the paper's (its Appendix A), weaker than an atomic max
// register's: over the tags the register orders values by,
//   - validity: a read returns the empty register, or the value of a write invoked before the
//     read returned, together with that write's tag;
//   - read-read monotonicity: a read's tag is at least that of every read that returned before
//     it was invoked;
//   - write-read monotonicity: a read's tag is at least that of every write that returned
//     before it was invoked.
// With one metadata word the register is moreover linearizable as an atomic max register,
// which farmem/lincheck's MaxRegister model (porcupine) checks. With several words it need not
// be (a read scans the words one by one, so it may return a write that began after another
// write it missed had completed), and the weak checker below is the specification.

type opKind uint8

const (
	kWrite opKind = iota
	kRead
)

// opRec is one recorded operation. sum is a digest of the value written or read, so validity
// also catches a value returned with another write's tag, or torn.
type opRec struct {
	client    int
	kind      opKind
	tag       maxreg.Tag
	sum       uint64
	call, ret farmem.Time
	unknown   bool // outcome unknown (error, crash): a write may or may not have taken effect
}

// recorder collects operations from many goroutines with fabric-clock times.
type recorder struct {
	rt  farmem.Runtime
	mu  sync.Mutex
	ops []opRec
}

func newRecorder(rt farmem.Runtime) *recorder { return &recorder{rt: rt} }

func (r *recorder) now() farmem.Time { return r.rt.Now() }

func (r *recorder) add(o opRec) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

func (r *recorder) all() []opRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

func digest(v []byte) uint64 {
	h := fnv.New64a()
	h.Write(v)
	return h.Sum64()
}

// payload is the value client c writes as its n-th write: length between 1 and size, bytes a
// function of (c, n).
func payload(c farmem.ClientID, n, size int) []byte {
	l := 1 + (int(c)*7919+n*104729)%size
	b := make([]byte, l)
	for i := range b {
		b[i] = byte(int(c)*31 + n*17 + i*13)
	}
	if l >= 8 {
		binary.LittleEndian.PutUint64(b, uint64(c)<<32|uint64(n))
	}
	return b
}

// checkWeak checks ops against the specification above and returns the first violation.
func checkWeak(ops []opRec) error {
	writes := map[uint64]opRec{}
	var done []opRec // completed writes and reads, by return time
	for _, o := range ops {
		if o.kind == kWrite {
			id := uint64(o.tag &^ maxreg.VerifiedBit)
			if w, dup := writes[id]; dup {
				return fmt.Errorf("two writes with tag %v: clients %d and %d", o.tag, w.client, o.client)
			}
			writes[id] = o
		}
		if !o.unknown {
			done = append(done, o)
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i].ret < done[j].ret })
	// prefix[i] is the largest tag among done[:i+1], and who had it.
	prefix := make([]int, len(done))
	for i := range done {
		prefix[i] = i
		if i > 0 && done[prefix[i-1]].tag > done[i].tag {
			prefix[i] = prefix[i-1]
		}
	}
	for _, r := range done {
		if r.kind != kRead {
			continue
		}
		if r.tag == 0 {
			if r.sum != digest(nil) {
				return fmt.Errorf("read by %d at %d returned the empty tag with a value", r.client, r.call)
			}
		} else {
			w, ok := writes[uint64(r.tag&^maxreg.VerifiedBit)]
			switch {
			case !ok:
				return fmt.Errorf("validity: read by %d at %d returned tag %v that no write used", r.client, r.call, r.tag)
			case w.call > r.ret:
				return fmt.Errorf("validity: read by %d [%d, %d] returned tag %v of a write invoked at %d, after it", r.client, r.call, r.ret, r.tag, w.call)
			case w.sum != r.sum:
				return fmt.Errorf("validity: read by %d at %d returned tag %v with a value that is not its write's", r.client, r.call, r.tag)
			case r.tag < w.tag:
				return fmt.Errorf("validity: read by %d at %d returned tag %v below its write's %v", r.client, r.call, r.tag, w.tag)
			}
		}
		// Every operation that returned strictly before r was invoked.
		n := sort.Search(len(done), func(i int) bool { return done[i].ret >= r.call })
		if n == 0 {
			continue
		}
		if p := done[prefix[n-1]]; p.tag > r.tag {
			what := "read-read"
			if p.kind == kWrite {
				what = "write-read"
			}
			return fmt.Errorf("%s monotonicity: read by %d [%d, %d] returned %v, below %v of client %d's operation that returned at %d",
				what, r.client, r.call, r.ret, r.tag, p.tag, p.client, p.ret)
		}
	}
	return nil
}

// checkAtomic checks ops with lincheck's max-register model (an atomic max register).
func checkAtomic(ops []opRec) error {
	mr := lincheck.MaxRegister(cmp.Compare[uint64])
	h := mr.NewHistory(nil)
	for _, o := range ops {
		rec := lincheck.Record[lincheck.MaxInput[uint64], uint64]{Client: o.client, Call: o.call, Return: o.ret, Outcome: lincheck.OK}
		if o.unknown {
			rec.Outcome = lincheck.Unknown
		}
		if o.kind == kWrite {
			rec.In = mr.Write(0, uint64(o.tag))
		} else {
			if o.unknown {
				continue
			}
			rec.In, rec.Out = mr.Read(0), uint64(o.tag)
		}
		h.Add(rec)
	}
	_, err := h.Verify(lincheck.Timeout(20 * time.Second))
	return err
}
