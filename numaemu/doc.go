// Package numaemu places memory on NUMA nodes and emulates the latency of memory that is not
// there.
//
// It reads the machine's topology from sysfs ([ReadTopology]: nodes, their CPUs, memory and
// distances, and DAX devices with their target node), wraps the memory-policy system calls that
// golang.org/x/sys lacks ([Mbind], [GetMempolicy], [MovePages]), pins threads to CPUs
// ([PinThread]), places a mapping on a node in the one order that works ([Place]: mbind, then
// populate with MADV_POPULATE_WRITE, then verify every page with move_pages in query mode), and
// emulates far memory with latency profiles ([LocalDRAM], [CXLDirect], [CXLSwitched], [RDMA],
// each with its published source) applied by a calibrated delay [Injector].
//
// # Asking for a node that is not there
//
// [Topology.Resolve] decides where a [Request] goes. If the node exists and has memory, the
// memory is bound there and nothing is injected: the hardware supplies the latency. If it does
// not (on a one-node machine, any remote node), Resolve fails with [ErrNoNode] unless the
// request allows a fallback; then the [Placement] says so explicitly (Emulated, with a Reason)
// and carries the profile's added latency for the caller to inject per access.
//
// # DAX
//
// Device DAX (/dev/daxX.Y) and filesystem DAX map device memory directly: the pages are the
// device's physical memory, so a memory policy (mbind, set_mempolicy) does not move or place
// them. Their node is the device's target_node (/sys/bus/dax/devices/*/target_node), which
// [Topology.DAXPlacement] reports; [Place] must not be used on such mappings.
//
// # Why not MAP_POPULATE
//
// MAP_POPULATE faults every page in inside mmap, before the caller can call mbind on the new
// range, so the pages land wherever the thread's policy (usually the local node) says. Binding
// afterwards affects only future faults unless MPOL_MF_MOVE migrates the pages, which costs a
// copy per page and can fail page by page. [Place] therefore maps without populating, binds,
// and only then populates with madvise(MADV_POPULATE_WRITE) (Linux 5.14), which write-faults
// every page under the new policy without changing its contents. On older kernels it falls back
// to touching one word per page with an atomic add of zero.
package numaemu
