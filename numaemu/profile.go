package numaemu

import (
	"fmt"
	"strings"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Profile is the idle load-to-use latency of one cache-line access to a kind of memory, with
// the published figure it is taken from. Bandwidth and queueing under load are not modelled.
type Profile struct {
	Name    string
	Latency time.Duration // idle latency of one 64-byte access (or one-sided round trip)
	Source  string        // the published figure
}

// The profiles. Figures are idle latencies; loaded latencies are higher on every kind.
var (
	// LocalDRAM: 81 ns. Intel Memory Latency Checker v3.10 idle latency on a two-socket
	// Cascade Lake server, local node 80.8 ns (remote node 140.4 ns), as published in the
	// gjbex/Code-optimization repository (info/cascadelake_mlc.txt); The Next Platform ("Just
	// How Bad Is CXL Memory Latency?", 2022) likewise puts CPU-attached DDR below 100 ns.
	LocalDRAM = Profile{"local-dram", 81 * time.Nanosecond,
		"Intel MLC v3.10 on 2-socket Cascade Lake: 80.8 ns local (gjbex/Code-optimization, info/cascadelake_mlc.txt)"}
	// CXLDirect: 150 ns. Li et al., "Pond: CXL-Based Memory Pooling Systems for Cloud
	// Platforms" (ASPLOS 2023): a direct-attached CXL memory controller adds 70-90 ns over
	// NUMA-local DRAM; the Pond artifact (MoatLab/Pond README) emulates CXL memory at about
	// 150 ns, one NUMA hop on a two-socket server. Liu et al. (ASPLOS 2025, arXiv 2409.14317)
	// measured 140-410 ns across four real CXL devices, of which 150 ns is the fast end.
	CXLDirect = Profile{"cxl-direct", 150 * time.Nanosecond,
		"Pond (Li et al., ASPLOS'23): +70-90 ns over local, emulated at ~150 ns; Liu et al. (ASPLOS'25) measured 140-410 ns"}
	// CXLSwitched: 250 ns. Direct-attached CXL (150 ns) plus one switch level: The Next
	// Platform's estimate for switched CXL (two retimers at ~60 ns each and a switch at
	// 100-120 ns) is 220-240 ns from CPU to device before the device's DRAM; Octopus (Berger
	// et al., arXiv 2501.09020) measured RPCs through a CXL switch 2.4x slower than through a
	// directly attached pooling device. 250 ns is inside Liu et al.'s measured 140-410 ns.
	CXLSwitched = Profile{"cxl-switched", 250 * time.Nanosecond,
		"Pond's 150 ns plus one switch hop (~100-120 ns switch, The Next Platform 2022); within Liu et al.'s 140-410 ns"}
	// RDMA: 1.9 µs. SWARM (in this project's papers/swarm.txt): the unreplicated one-round-trip
	// RDMA get (RAW) has a median latency of 1.9 µs on its InfiniBand testbed; ib_send_lat
	// reports 0.83 µs one way for 32-byte RC messages on a comparable fabric (D. Potter's
	// thesis tables), i.e. about 1.7 µs a round trip.
	RDMA = Profile{"rdma", 1900 * time.Nanosecond,
		"SWARM (papers/swarm.txt): one-round-trip RDMA get median 1.9 us; ib_send_lat 0.83 us one way (32 B, RC)"}
)

// Profiles returns every profile, fastest first.
func Profiles() []Profile { return []Profile{LocalDRAM, CXLDirect, CXLSwitched, RDMA} }

// ProfileByName returns the profile called name.
func ProfileByName(name string) (Profile, error) {
	for _, p := range Profiles() {
		if strings.EqualFold(p.Name, name) {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("numaemu: unknown profile %q: %w", name, farmem.ErrInvalid)
}

// Added is the delay to inject per access to emulate p with memory that is really local DRAM:
// p's latency less LocalDRAM's, never negative.
func (p Profile) Added() time.Duration { return max(0, p.Latency-LocalDRAM.Latency) }

// String returns "name (latency)".
func (p Profile) String() string { return fmt.Sprintf("%s (%v)", p.Name, p.Latency) }
