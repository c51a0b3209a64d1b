package sim

import (
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Model is the simulated cluster: its shape and the costs of its parts. Every duration is
// virtual. The zero Model is a valid, ideal cluster (one memory node, one compute node, every
// cost zero); the presets ConnectX3 and ConnectX6 describe the papers' testbeds.
//
// A verb's path: the client's compute node charges OpCPU on one of its Cores (queued behind
// other work there); its NIC issues the request (NIC.Issue, FIFO in posting order); the
// request crosses the link (MemoryLatency or ComputeLatency, plus Jitter and any link delay
// fault); the target's NIC serves it (a FIFO queue in front of NIC.Units processing units,
// each op costing NIC.Verb[kind]) and the op takes effect when its service starts; its payload
// crosses the target's port at NIC.Bandwidth; an atomic takes effect when it gets its word and
// holds it for NIC.AtomicUnit (atomics to one word, or to words sharing one of
// NIC.AtomicSlots hashed slots, are serialized); when the service ends, the answer crosses
// the link back. Ops of one client to one node take effect in posting order (an RC queue
// pair). An unloaded READ of b bytes therefore takes OpCPU + Issue + 2 latencies +
// Verb[READ] + b/Bandwidth, and an atomic Verb[kind] + AtomicUnit instead of the last two.
// Verbs to the caller's own compute node's region are CPU accesses (LocalAccess, no NIC, no
// link), except atomics to words a peer has reached with a NIC atomic, which loop through the
// caller's own NIC (see LocalAccess).
type Model struct {
	// Name labels the model in reports.
	Name string

	// Shape is the cluster's shape: MemoryNodes memory nodes of MemorySize bytes, and
	// ComputeNodes compute nodes, each with ClientsPerNode client slots, MaxHandlers of them
	// reserved for Call handlers (so at most that many handlers run on a node at once), a
	// SliceSize slice per client and a SharedSize shared area (see transport.Shape for the
	// defaults).
	transport.Shape
	// DownTimeout is how long an unanswered op waits before it fails with ErrNodeDown
	// (default 10ms).
	DownTimeout time.Duration

	// MemoryLatency is the one-way latency of a link between a compute node and a memory node;
	// ComputeLatency between two compute nodes.
	MemoryLatency  time.Duration
	ComputeLatency time.Duration
	// Jitter adds a uniformly random delay in [0, Jitter) to every one-way trip over a link
	// (not to a loopback through a node's own NIC), drawn from the seed.
	Jitter time.Duration

	// MemoryNIC is the NIC of every memory node; ComputeNIC that of every compute node.
	MemoryNIC  NIC
	ComputeNIC NIC
	// CoLocated puts compute nodes on their memory nodes' machines, as testbeds that emulate
	// many compute nodes beside each memory node do (CIDER §5.1): compute node i (from 1)
	// shares the NIC of memory node (i-1) mod MemoryNodes + 1, with MemoryNIC's costs, so the
	// verbs and messages it serves and issues queue with that memory node's. Reports list the
	// shared NIC once, under the memory node.
	CoLocated bool

	// Cores is the number of cores of each compute node (default 1).
	Cores int
	// OpCPU is the client CPU cost of posting one op (a verb of a batch, or a Call), charged
	// to the client's compute node's cores as queued work.
	OpCPU time.Duration
	// CallCPU is the CPU cost of receiving a Call and dispatching its handler, charged to the
	// target compute node's cores before the handler runs. The handler runs on a handler client
	// of the target, so its own Runtime.Compute calls, and the OpCPU of the verbs it issues,
	// queue on the target's cores too: handlers of concurrent calls share those cores with the
	// node's clients and with each other.
	CallCPU time.Duration

	// LocalAccess is the CPU time of one verb on a word of the client's own compute node's
	// region that no client of another compute node has reached with an atomic (a local
	// latch, a cached frame, a proxy's local index slot): a load, store or CPU atomic instead
	// of a NIC verb, charged to the client's cores in place of OpCPU; reads and writes add
	// their length at LocalBandwidth (0: unlimited). The presets set the sourced DRAMAccess and
	// DRAMBandwidth; zero charges OpCPU instead, with no bandwidth term (as if the access were
	// a verb posted to a NIC).
	//
	// A word becomes NIC-reached, for the rest of the run, when an atomic (CAS, FAA, masked
	// CAS) from a client of another compute node takes effect on it: an RDMA NIC's atomics are
	// not atomic with the host CPU's, so from then on the node's own clients' atomics on that
	// word go through their own NIC too. Such an atomic costs OpCPU, the NIC's issue, a trip
	// of LoopbackLatency to the NIC's receive side and one back, and the NIC's service and
	// atomic unit, queued with the NIC's other work (LoopbackLatency is 500ns in the presets:
	// see loopbackLatency's sources). Plain reads and writes of such a word stay CPU accesses
	// (DMA is coherent with the host's caches). In a batch, once one op to the own region goes
	// through the NIC, the batch's later ops to the own region follow it, to keep their
	// order. The rule is deterministic: it depends on the order in which atomics
	// take effect, which the seed fixes. Stats count these verbs as local, like every verb to
	// the own region (no round trip); only their time differs.
	LocalAccess     time.Duration
	LocalBandwidth  float64
	LoopbackLatency time.Duration

	// ClockOffset and ClockDrift make the clients' clocks disagree, as unsynchronized
	// machines' do: each client's Runtime.Now reads true virtual time plus an offset drawn
	// uniformly from [-ClockOffset, ClockOffset] plus the time since Epoch scaled by a drift
	// drawn uniformly from [-ClockDrift, ClockDrift] parts per million (below 10^5). A client
	// can therefore read a time earlier than one another client read before it: the stale
	// timestamps SWARM's Safe-Guess must survive. Both are drawn from the seed and the client
	// id alone (a client id keeps its clock across reopening), from a source of their own that
	// takes no draw from the run's other sources. Durations a client's runtime waits for
	// (Sleep, AfterFunc, WithTimeout) are measured on its own clock: d lasts
	// d/(1+drift·10⁻⁶) of true time, rounded up, so after Sleep(d) the client's Now has
	// advanced by d (to a nanosecond); a context from WithTimeout reports its Deadline on the
	// clock of the runtime that made it. The fabric's runtime (Sim.Runtime), Sim.Now, At,
	// reports, down timeouts and fault schedules use true time; Compute(d) is work, not a
	// wait, and takes d of true time.
	//
	// Zero (the default, and the presets') gives every client the true clock. No source pins
	// either value for the papers' testbeds; sweep ClockDrift up to 100 ppm (the bound
	// FlexKV's lease rule assumes, δ = 10⁻⁴, and the usual tolerance of a server's crystal)
	// and ClockOffset from 1µs (PTP-class synchronization) to 1ms (NTP-class).
	ClockOffset time.Duration
	ClockDrift  float64

	// Tearing applies reads and writes longer than 8 bytes in TearChunks word-aligned pieces
	// (default 8, at most 64), in a random order, spread across their time at the target
	// (from the moment they may start, after the previous op of their queue pair, to the end
	// of their service), so that concurrent long accesses interleave for real. The fault
	// Sim.SetTearing switches it per node.
	Tearing    bool
	TearChunks int
}

// NIC is the cost model of one node's network card.
type NIC struct {
	// Verb is the service time of an inbound verb of each kind: the time it occupies one
	// processing unit. FlexKV measured CAS at about a tenth of WRITE's rate.
	Verb [farmem.NumOpKinds]time.Duration
	// Send is the service time of a two-sided message (a Call request or reply) at the NIC
	// that receives it.
	Send time.Duration
	// Issue is the time the requesting NIC spends issuing one outbound op or message.
	Issue time.Duration
	// Bandwidth is the port's rate in bytes per second; 0 is unlimited. Read and write
	// payloads and Call messages cross it, one at a time.
	Bandwidth float64
	// Units is the number of parallel processing units behind the NIC's one queue (default 1:
	// an M/D/1 server).
	Units int
	// AtomicUnit is how long an atomic holds its word: atomics to one word (or to words
	// sharing one of AtomicSlots hashed slots, default 4096) are serialized at this spacing,
	// whatever the number of units.
	AtomicUnit  time.Duration
	AtomicSlots int
}

func (n *NIC) defaults() {
	if n.Units == 0 {
		n.Units = 1
	}
	if n.AtomicSlots == 0 {
		n.AtomicSlots = 4096
	}
}

func (n *NIC) check(name string) error {
	if n.Units < 0 || n.AtomicSlots < 0 || n.Bandwidth < 0 || n.Send < 0 || n.Issue < 0 || n.AtomicUnit < 0 {
		return fmt.Errorf("sim: %s NIC: negative parameter: %w", name, farmem.ErrInvalid)
	}
	for _, v := range n.Verb {
		if v < 0 {
			return fmt.Errorf("sim: %s NIC: negative verb cost: %w", name, farmem.ErrInvalid)
		}
	}
	return nil
}

func (m *Model) defaults() error {
	m.EnsureDefaults()
	if m.DownTimeout == 0 {
		m.DownTimeout = 10 * time.Millisecond
	}
	if m.Cores == 0 {
		m.Cores = 1
	}
	if m.TearChunks == 0 {
		m.TearChunks = 8
	}
	m.MemoryNIC.defaults()
	m.ComputeNIC.defaults()
	if err := m.Check(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if m.DownTimeout < 0 || m.MemoryLatency < 0 || m.ComputeLatency < 0 || m.Jitter < 0 ||
		m.Cores < 0 || m.OpCPU < 0 || m.CallCPU < 0 || m.TearChunks < 0 || m.TearChunks > 64 ||
		m.LocalAccess < 0 || m.LocalBandwidth < 0 || m.LoopbackLatency < 0 || m.ClockOffset < 0 ||
		!(m.ClockDrift >= 0 && m.ClockDrift < 1e5) {
		return fmt.Errorf("sim: negative model parameter (or ClockDrift of 10^5 ppm or more): %w", farmem.ErrInvalid)
	}
	if err := m.MemoryNIC.check("memory"); err != nil {
		return err
	}
	return m.ComputeNIC.check("compute")
}

// rateCost returns the service time of one op at ops operations per second.
func rateCost(ops float64) time.Duration { return time.Duration(1e9/ops + 0.5) }

// verbCosts returns per-kind service times with READ and WRITE at rw and the atomics at
// atomicFactor times that.
func verbCosts(rw time.Duration, atomicFactor float64) [farmem.NumOpKinds]time.Duration {
	a := time.Duration(float64(rw)*atomicFactor + 0.5)
	return [farmem.NumOpKinds]time.Duration{
		farmem.OpRead: rw, farmem.OpWrite: rw, farmem.OpCAS: a, farmem.OpFAA: a, farmem.OpMaskedCAS: a,
	}
}

// casPerWrite is FlexKV's measured ratio (§3.1, Fig. 3; 8-byte ops, 200 clients): RDMA_WRITE
// reaches 10.1 times the throughput of RDMA_CAS, and two-sided SEND&RECV 19.5 times; the
// authors report that the gap holds on ConnectX-4/5/6.
const (
	casPerWrite = 10.1
	casPerSend  = 19.5
)

// ConnectX6 models the CIDER testbed (CIDER §5.1): 100 Gb/s Mellanox ConnectX-6 NICs, and
// compute nodes emulated with 4 cores and one client per core (up to 128 such nodes, 512
// clients, against 8 memory nodes). The shape defaults to one memory node and one compute
// node; set MemoryNodes, ComputeNodes and ClientsPerNode for an experiment.
//
// Figures and their sources (each parameter, with how firmly a publication pins it):
//   - READ/WRITE service 5ns: the adapter's 215 million messages per second (NVIDIA
//     ConnectX-6 user manual, "Introduction"), 4.65ns rounded to virtual time's nanosecond.
//     Vendor peak, not a measurement of inbound one-sided verbs: an upper bound on the rate.
//   - CAS, FAA and masked CAS 10.1x that; SEND 10.1/19.5 of WRITE's cost (FlexKV §3.1 Fig. 3,
//     measured on ConnectX-3; the FlexKV authors say the ratios hold on ConnectX-4/5/6, but
//     publish no ConnectX-6 figure).
//   - Bandwidth 12.5 GB/s: the testbed's 100 Gb/s ports (CIDER §5.1; Dolphin notes use
//     bytes/12.5 GB/s for the same class of NIC).
//   - One-way latency 1µs: the papers' notes model a 2µs round trip (CIDER notes §7, Dolphin
//     notes §6); SWARM measured 2.2µs for a one-round-trip GET on ConnectX-6 clients.
//   - 4 cores per compute node (CIDER §5.1).
//   - Units 1 (one atomic pipeline per NIC): no source; the default of every model.
//
// Assumptions that no publication pins, and how the experiments treat them: AtomicUnit 250ns
// (a same-word atomic is a PCIe read-modify-write inside the NIC, so one word sustains a few
// million atomics per second; the hottest pointer's throughput, and so every contended ratio,
// moves with it, and `farmem repro cider --atomic-unit` sweeps it over 100ns, 250ns and 500ns
// to report ratios as bands), OpCPU 300ns of client CPU per op, CallCPU 1µs per handled Call,
// LoopbackLatency 500ns (see loopbackLatency). LocalAccess and LocalBandwidth are DRAMAccess
// and DRAMBandwidth (a CPU access to the node's own memory), and the clocks are synchronized.
func ConnectX6() Model {
	rw := rateCost(215e6)
	nic := NIC{
		Verb:       verbCosts(rw, casPerWrite),
		Send:       time.Duration(float64(rw)*casPerWrite/casPerSend + 0.5),
		Issue:      rw,
		Bandwidth:  12.5e9,
		Units:      1,
		AtomicUnit: 250 * time.Nanosecond,
	}
	return Model{
		Name:            "ConnectX-6 (CIDER testbed)",
		MemoryLatency:   time.Microsecond,
		ComputeLatency:  time.Microsecond,
		MemoryNIC:       nic,
		ComputeNIC:      nic,
		Cores:           4,
		OpCPU:           300 * time.Nanosecond,
		CallCPU:         time.Microsecond,
		LoopbackLatency: loopbackLatency,
		LocalAccess:     DRAMAccess,
		LocalBandwidth:  DRAMBandwidth,
	}
}

// ConnectX3 models the FlexKV and SELCC testbeds (FlexKV §5.1, SELCC §7): 56 Gb/s Mellanox
// ConnectX-3 FDR NICs on an SX6036G switch, machines with two 8-core Xeon E5-2650v2 (16 cores),
// 20 compute nodes of 10 clients against 3 memory nodes in FlexKV. The shape defaults to one
// memory node and one compute node.
//
// Figures and their sources:
//   - CAS, FAA and masked CAS 10.1x the cost of WRITE, SEND 10.1/19.5 of it (FlexKV §3.1 Fig. 3,
//     measured on this ConnectX-3 testbed with 200 clients).
//   - Bandwidth 7 GB/s: 56 Gb/s FDR ports (FlexKV §5.1, SELCC §7).
//   - 16 cores per compute node (two 8-core E5-2650v2, FlexKV §5.1).
//   - SELCC §7.1.4 reports that ConnectX-3 saturates on READ and atomics before SEND, RECV and
//     WRITE; READ therefore costs more than WRITE here.
//
// Assumptions, not figures from the papers: WRITE service 28.6ns (35 million inbound writes
// per second) and READ 40ns (25 million), the order of magnitude reported for this NIC
// generation; one-way latency 1.5µs (the adapter alone is sub-microsecond, plus a switch hop
// and an older PCIe); AtomicUnit 400ns; OpCPU 500ns; CallCPU 2µs; LoopbackLatency 500ns (see
// loopbackLatency). LocalAccess and LocalBandwidth are DRAMAccess and DRAMBandwidth, and the
// clocks are synchronized.
func ConnectX3() Model {
	w := rateCost(35e6)
	nic := NIC{
		Verb:       verbCosts(w, casPerWrite),
		Send:       time.Duration(float64(w)*casPerWrite/casPerSend + 0.5),
		Issue:      w,
		Bandwidth:  7e9,
		Units:      1,
		AtomicUnit: 400 * time.Nanosecond,
	}
	nic.Verb[farmem.OpRead] = rateCost(25e6)
	return Model{
		Name:            "ConnectX-3 (FlexKV/SELCC testbed)",
		MemoryLatency:   1500 * time.Nanosecond,
		ComputeLatency:  1500 * time.Nanosecond,
		MemoryNIC:       nic,
		ComputeNIC:      nic,
		Cores:           16,
		OpCPU:           500 * time.Nanosecond,
		CallCPU:         2 * time.Microsecond,
		LoopbackLatency: loopbackLatency,
		LocalAccess:     DRAMAccess,
		LocalBandwidth:  DRAMBandwidth,
	}
}

// Costs of a compute node's own memory, for Model.LocalAccess and Model.LocalBandwidth. The
// presets leave those fields zero (an own-region access then costs OpCPU, as it did before
// they existed, so the figures published from the presets stand); experiments whose clients
// work on their own node's memory (SELCC's frame latches and cache hits, FlexKV's proxy) set
// them to these values:
//   - DRAMAccess 100ns: one main-memory reference (J. Dean's "numbers everyone should know",
//     LADIS 2009 keynote, gives 100ns; idle-latency measurements of server DRAM put it at
//     80-100ns). A hot latch word sits in the CPU's caches and costs less (10-40ns from
//     L2/L3), so sweep 20ns-150ns.
//   - DRAMBandwidth 10 GB/s: one core copying from DRAM. No source pins it for these
//     testbeds; sweep 5-20 GB/s.
const (
	DRAMAccess    = 100 * time.Nanosecond
	DRAMBandwidth = 10e9
)

// loopbackLatency is the presets' Model.LoopbackLatency, 500ns one way: a verb a host posts to
// its own NIC for its own memory crosses PCIe to the NIC and back instead of the wire. No
// publication pins the loopback of these adapters; PCIe DMA round trips measure several
// hundred nanoseconds to about a microsecond (Neugebauer et al., "Understanding PCIe
// performance for end host networking", SIGCOMM 2018). Sweep 250ns-1µs.
const loopbackLatency = 500 * time.Nanosecond
