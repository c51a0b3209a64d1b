package far_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem/lincheck"
)

// brokenLoad reads a SingleWriter pointer to a wide value with one Read of its record (layout
// in the package doc), whatever the transport, and a weakened check: "none" takes the record
// as it comes; "versions" compares the two version words, which is Ptr.Load's check, but
// reads with one Read where the Memory does not read in address order (Ptr.Load reads H, the
// value and T as three Reads in one batch there). It returns the value and whether the
// (weakened) check passed.
func brokenLoad(ctx context.Context, c *far.Client, p far.Ptr[wide], check string, buf []byte) (wide, bool, error) {
	const k = 64 // words of a wide value
	rec := buf[:8*(k+2)]
	if err := c.Memory().Read(ctx, p.Addr(), rec); err != nil {
		return wide{}, false, err
	}
	le := binary.LittleEndian
	if check == "versions" && le.Uint64(rec) != le.Uint64(rec[len(rec)-8:]) {
		return wide{}, false, nil
	}
	var w wide
	for j := range w.W {
		w.W[j] = le.Uint64(rec[8+8*j:])
	}
	return w, true, nil
}

// TestSingleWriterWeakChecksFail shows that the single-writer lincheck test can fail: with the
// check of a load weakened, the same workload returns torn values and non-linearizable
// histories. Without any check, tears are returned on local and on sim. Comparing the version
// words of one Read is enough on local, whose long reads copy in address order (the ordered
// argument of the package doc), and not on sim, whose long reads land in pieces in a random
// order as a NIC's DMA may: that is why Ptr.Load reads the record there as three Reads in one
// batch, and why it asks the Memory (transport.OrderedReader) before it reads with one.
func TestSingleWriterWeakChecksFail(t *testing.T) {
	for fname, mk := range fabrics(t) {
		for _, check := range []string{"none", "versions"} {
			t.Run(fname+"/"+check, func(t *testing.T) {
				// attempt runs the workload once on a new fabric and reports whether a torn value
				// or a non-linearizable history showed. Tears on local come from real concurrency,
				// so a run can miss them: the cases that must be caught get several attempts.
				attempt := func() bool {
					r := mk(t)
					reg := lincheck.Register[wide]()
					h := reg.NewHistory(r.f.Runtime())
					ps := make([]far.Ptr[wide], linKeys)
					var torn atomic.Uint64
					ops := linOps(r)
					r.parallel(t, linClients, func(c *far.Client) {
						for k := range ps {
							var err error
							ps[k], err = far.NewPtr(context.Background(), c, wide{}, far.PtrOptions[wide]{Mode: far.SingleWriter, Node: 1})
							require.NoError(t, err)
						}
					}, func(i int, c *far.Client) error {
						ctx := context.Background()
						rec := h.Client(i + 1)
						rnd := c.Memory().Runtime().Rand()
						buf := make([]byte, 1024)
						for s := range ops {
							k := rnd.IntN(linKeys)
							if i == 0 {
								v := wideOf(uint64(i+1)<<32 | uint64(s+1))
								op := rec.Call(reg.Write(uint64(k), v))
								op.End(reg.Ack(), ps[k].Store(ctx, c, v))
								continue
							}
							op := rec.Call(reg.Read(uint64(k)))
							for {
								v, ok, err := brokenLoad(ctx, c, ps[k], check, buf)
								if err != nil || ok {
									if err == nil && !v.whole() {
										torn.Add(1)
									}
									op.End(reg.Value(v), err)
									break
								}
							}
						}
						return nil
					})
					_, verr := h.Verify()
					t.Logf("%d torn values returned; lincheck: %v", torn.Load(), verr)
					return torn.Load() > 0 || verr != nil
				}
				if fname == "local" && check == "versions" {
					require.False(t, attempt(), "the version words alone let a tear through on a transport that copies in address order")
					return
				}
				caught := false
				for range 20 {
					if caught = attempt(); caught {
						break
					}
				}
				require.True(t, caught, fmt.Sprintf("a load with check %q was not caught on %s in 20 runs", check, fname))
			})
		}
	}
}
