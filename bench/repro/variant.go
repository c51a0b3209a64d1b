package repro

import (
	"fmt"
	"strings"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// Variant sets model costs that no publication pins (see sim.ConnectX6's doc) for one run; a
// zero field keeps the model's value. A sweep's Band lists variants: each reruns the points
// the headline figures are taken at, and the comparison with the paper reports each ratio as
// the band over the model and its variants.
type Variant struct {
	// AtomicUnit is the NIC's cost of one atomic on one word (sim.NIC.AtomicUnit; the model's
	// 250ns is an assumption: a same-word atomic is a PCIe read-modify-write inside the NIC).
	AtomicUnit time.Duration
	// AtomicRatio is an atomic verb's NIC service time over a WRITE's (the model's 10.1 is
	// FlexKV's ConnectX-3 measurement, reused on ConnectX-6 where no figure is published).
	AtomicRatio float64
	// OpCPU is the client CPU per verb (sim.Model.OpCPU; the model's 300ns is an assumption).
	OpCPU time.Duration
	// LocalAccess is the CPU cost of an access to the compute node's own memory (local write
	// combining's latches; sim.Model.LocalAccess, the model's sim.DRAMAccess 100ns; the sourced
	// range is 20-150ns).
	LocalAccess time.Duration
	// CallCPU is the CPU of receiving one message and dispatching its handler
	// (sim.Model.CallCPU; the presets' 1µs and 2µs are assumptions).
	CallCPU time.Duration
}

// IsZero reports whether v keeps every model cost.
func (v Variant) IsZero() bool { return v == Variant{} }

// String names the costs v changes ("the model's costs" if none).
func (v Variant) String() string {
	var parts []string
	if v.AtomicUnit > 0 {
		parts = append(parts, fmt.Sprintf("atomic unit %v", v.AtomicUnit))
	}
	if v.AtomicRatio > 0 {
		parts = append(parts, fmt.Sprintf("atomic/WRITE cost %gx", v.AtomicRatio))
	}
	if v.OpCPU > 0 {
		parts = append(parts, fmt.Sprintf("CPU per verb %v", v.OpCPU))
	}
	if v.LocalAccess > 0 {
		parts = append(parts, fmt.Sprintf("local access %v", v.LocalAccess))
	}
	if v.CallCPU > 0 {
		parts = append(parts, fmt.Sprintf("CPU per message %v", v.CallCPU))
	}
	if len(parts) == 0 {
		return "the model's costs"
	}
	return strings.Join(parts, ", ")
}

func (v Variant) check() error {
	if v.AtomicUnit < 0 || v.AtomicRatio < 0 || v.OpCPU < 0 || v.LocalAccess < 0 || v.CallCPU < 0 {
		return fmt.Errorf("%w: negative cost in %+v", ErrConfig, v)
	}
	return nil
}

// apply sets v's costs in m.
func (v Variant) apply(m *sim.Model) {
	if v.AtomicUnit > 0 {
		m.MemoryNIC.AtomicUnit, m.ComputeNIC.AtomicUnit = v.AtomicUnit, v.AtomicUnit
	}
	if v.AtomicRatio > 0 {
		for _, nic := range []*sim.NIC{&m.MemoryNIC, &m.ComputeNIC} {
			a := time.Duration(float64(nic.Verb[farmem.OpWrite])*v.AtomicRatio + 0.5)
			nic.Verb[farmem.OpCAS], nic.Verb[farmem.OpFAA], nic.Verb[farmem.OpMaskedCAS] = a, a, a
		}
	}
	if v.OpCPU > 0 {
		m.OpCPU = v.OpCPU
	}
	if v.LocalAccess > 0 {
		m.LocalAccess = v.LocalAccess
	}
	if v.CallCPU > 0 {
		m.CallCPU = v.CallCPU
	}
}

// DefaultBand is the variants the full and quick sweeps rerun their headline points at: each
// unpinned cost at the two ends of its plausible range, the others at the model's value.
//   - Atomic unit 100ns and 500ns around the model's 250ns.
//   - Atomic/WRITE cost 5x and 20x around FlexKV's ConnectX-3 10.1x.
//   - CPU per verb 100ns and 1µs around 300ns.
//   - Local access 20ns and 150ns around DRAM's 100ns (sim.DRAMAccess's sweep range).
func DefaultBand() []Variant {
	return []Variant{
		{AtomicUnit: 100 * time.Nanosecond}, {AtomicUnit: 500 * time.Nanosecond},
		{AtomicRatio: 5}, {AtomicRatio: 20},
		{OpCPU: 100 * time.Nanosecond}, {OpCPU: time.Microsecond},
		{LocalAccess: 20 * time.Nanosecond}, {LocalAccess: 150 * time.Nanosecond},
	}
}
