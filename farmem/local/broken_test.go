package local_test

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"

	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
)

// A broken transport must fail the conformance test aimed at its defect: otherwise that test
// could not fail. Each defect runs in a child process so its failures stay there.
func TestSuiteCatchesBrokenTransports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite in child processes")
	}
	t.Parallel() // child processes of its own, side by side with the suites above
	for defect, test := range map[string]string{
		"faa-lost":        "FAASum",
		"cas-lost":        "CASLoop",
		"stats-off":       "ExactStats",
		"unsignaled-lost": "Unsignaled",
		"batch-reversed":  "BatchOrder",
		"close-twice":     "Close",
		"wait-early":      "Wait",
		"no-tears":        "Tearing",
		"mcas-as-cas":     "AtomicsTable",
		"bounds-ignored":  "BoundsAndAlignment",
	} {
		t.Run(defect, func(t *testing.T) {
			t.Parallel() // each child runs one test of the suite on its own transport
			cmd := exec.Command(os.Args[0], "-test.run", "^TestBrokenConformance$/^"+test+"$", "-test.v")
			cmd.Env = append(os.Environ(), "FARMEM_BROKEN="+defect)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the suite passed a transport with defect %s:\n%s", defect, out)
			require.Contains(t, string(out), "--- FAIL: TestBrokenConformance/"+test, "%s", out)
		})
	}
}

// TestBrokenConformance runs the suite on a transport with the defect FARMEM_BROKEN names.
func TestBrokenConformance(t *testing.T) {
	defect := os.Getenv("FARMEM_BROKEN")
	if defect == "" {
		t.Skip("only as a child of TestSuiteCatchesBrokenTransports")
	}
	farmemtest.Run(t, func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
		f, err := local.New(local.Options{
			Shape:       transport.Shape{MemoryNodes: cfg.MemoryNodes, MemorySize: cfg.MemorySize, ComputeNodes: cfg.ComputeNodes},
			DownTimeout: cfg.DownTimeout,
			Tearing:     true,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		return &farmemtest.Cluster{Fabrics: []farmem.Fabric{brokenFabric{f, defect, new(sync.Mutex)}}, Faults: f, TearsOnPurpose: true}
	})
}

type brokenFabric struct {
	*local.Fabric
	defect string
	copyMu *sync.Mutex // "no-tears": long copies are made atomic, which the transport claims not to do
}

func (b brokenFabric) Open(ctx context.Context, n farmem.NodeID) (farmem.Memory, error) {
	m, err := b.Fabric.Open(ctx, n)
	if err != nil {
		return nil, err
	}
	return &brokenMemory{Memory: m, defect: b.defect, copyMu: b.copyMu}, nil
}

type brokenMemory struct {
	farmem.Memory
	defect string
	copyMu *sync.Mutex
	n      int
	closed bool
}

func (m *brokenMemory) Write(ctx context.Context, a farmem.Addr, src []byte) error {
	if m.defect == "no-tears" {
		m.copyMu.Lock()
		defer m.copyMu.Unlock()
	}
	return m.Memory.Write(ctx, a, src)
}

func (m *brokenMemory) FAA(ctx context.Context, a farmem.Addr, d uint64) (uint64, error) {
	m.n++
	if m.defect == "faa-lost" && m.n%50 == 0 {
		return m.Memory.FAA(ctx, a, 0)
	}
	return m.Memory.FAA(ctx, a, d)
}

func (m *brokenMemory) CAS(ctx context.Context, a farmem.Addr, old, new uint64) (uint64, error) {
	m.n++
	if m.defect == "cas-lost" && m.n%40 == 0 {
		return old, nil // claims success, swaps nothing
	}
	return m.Memory.CAS(ctx, a, old, new)
}

func (m *brokenMemory) Read(ctx context.Context, a farmem.Addr, dst []byte) error {
	if m.defect == "bounds-ignored" && len(dst) == 8 && a.Offset()%8 == 4 {
		return nil
	}
	if m.defect == "no-tears" {
		m.copyMu.Lock()
		defer m.copyMu.Unlock()
	}
	return m.Memory.Read(ctx, a, dst)
}

func (m *brokenMemory) Stats() farmem.Stats {
	s := m.Memory.Stats()
	if m.defect == "stats-off" {
		s.RoundTrips++
	}
	return s
}

func (m *brokenMemory) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	switch m.defect {
	case "unsignaled-lost":
		var kept farmem.Batch
		for _, op := range b.Ops {
			if !op.Unsignaled {
				kept.Ops = append(kept.Ops, op)
			}
		}
		if len(kept.Ops) == 0 {
			p, _ := transport.NewPending(b, nil)
			return p
		}
		p := m.Memory.Post(ctx, &kept)
		_ = p.Wait(ctx, 0)
		for i := range b.Ops {
			b.Ops[i] = kept.Ops[min(i, len(kept.Ops)-1)]
		}
		return p
	case "batch-reversed":
		for i, j := 0, len(b.Ops)-1; i < j; i, j = i+1, j-1 {
			b.Ops[i], b.Ops[j] = b.Ops[j], b.Ops[i]
		}
	case "mcas-as-cas":
		for i := range b.Ops {
			if op := &b.Ops[i]; op.Kind == farmem.OpMaskedCAS {
				*op = farmem.Op{Kind: farmem.OpCAS, Addr: op.Addr, Cmp: op.Cmp, Swap: op.Swap}
			}
		}
	}
	return m.Memory.Post(ctx, b)
}

func (m *brokenMemory) Do(ctx context.Context, b *farmem.Batch) error {
	p := m.Post(ctx, b)
	if err := p.Wait(ctx, 0); err != nil {
		return err
	}
	return transport.Err(p)
}

func (m *brokenMemory) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	if m.defect == "wait-early" && until != nil {
		var buf [8]byte
		err := m.Memory.Read(ctx, a, buf[:])
		return uint64(buf[0]), err
	}
	return m.Memory.Wait(ctx, a, until)
}

func (m *brokenMemory) Close() error {
	if m.defect == "close-twice" && m.closed {
		return farmem.ErrClosed
	}
	m.closed = true
	return m.Memory.Close()
}
