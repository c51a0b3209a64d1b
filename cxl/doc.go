// Package cxl is the memory-mapped far-memory transport: a region that several OS processes
// map and share, as compute nodes sharing a CXL memory device would, served as a
// [farmem.Fabric] with no server to start.
//
// # Regions
//
// [Create] makes a region once: a memfd (empty path; sealed against shrinking with
// F_SEAL_SHRINK), a file on /dev/shm or another memory file system, a file on hugetlbfs, a file
// on a DAX file system (mapped MAP_SHARED_VALIDATE|MAP_SYNC; a file system without DAX is a
// clear [ErrNotDAX]) or a device-DAX instance (/dev/daxX.Y, formatted in place). Files are
// formatted under a temporary name and renamed into place, so no process opens half a region.
// The memory is placed through numaemu (mbind, MADV_POPULATE_WRITE, verified with move_pages;
// [Options.Placement]); DAX memory is the device's and only reported.
//
// In one process, Create("", Options{...}) and [Region.Attach] are all it takes (see the
// example): creating, placing and populating a region takes about a millisecond per MiB,
// attaching a fraction of one, and a verb costs tens of nanoseconds. [CreateTemp] makes a
// region in a fresh file (on /dev/shm by default) that other processes can open by name and
// that disappears with its creator's handle.
//
// Other processes open the region by path: [Open] (map and attach in one call) or [OpenRegion]
// then [Region.Attach]. A memfd has no name in the file system: other processes open
// /proc/<pid>/fd/<n> of the creator ([Region.Path] returns it; it needs the same user, and
// lives while the creator keeps the region open), or inherit the descriptor (exec.Cmd's
// ExtraFiles: the child opens /proc/self/fd/3). Every handle on one file in a process shares one
// mapping. OpenRegion validates the header before mapping (magic, version, checksum, and a
// layout recomputed from the parameters) and writes nothing to a file that fails; the header
// decoder is fuzzed.
//
// # Layout and nodes
//
// A region file holds, in order: a 4 KiB header; the compute-id table (a 64-byte entry per
// compute id: lease word, pid, start time, host); for each compute id its addressable region
// (farmem's layout: a 4 KiB header, client slices, the shared area) followed by its control
// block (doorbell, wake buckets, mailboxes); then the memory nodes, each a page-aligned
// partition. Memory node n is the n-th partition: each partition of one region file is a memory
// node, ids 1..MemoryNodes. Offset 0 of a memory node is its first byte, which belongs to the
// alloc package's node header: this package never writes it, and all of its own control data
// lie outside every address range a verb can reach (verbs are bounds-checked against the node's
// size, so no Addr reaches the header, the table or a control block).
//
// A compute node is a [Fabric] handle: each [Region.Attach] claims the lowest free compute id
// with a CAS on its lease word (a 24-bit generation and an expiry), so a process may attach
// several times and act as several compute nodes. The lease runs for the down timeout in fabric
// time, which is the Unix wall clock ([transport.WallRuntime]) so it compares across processes; the
// handle renews it every quarter of that. Close releases the id. When a process dies, its ids
// expire with their leases; on the same host (same boot and pid namespace) a dead, zombie or
// replaced pid is noticed at once by whoever checks. Either way the checker fences the id (marks
// its lease crashed) so every process agrees, and the next Attach reclaims it, zeroing its
// region and resetting its mailboxes. A live process whose lease was fenced (it stalled past
// the down timeout) finds out at its next renewal and crashes its node itself.
//
// The [farmem.Topology] is static: every memory node and every compute id of the region. A
// compute id that no process holds is a down node: verbs and Calls to it fail with
// farmem.ErrNodeDown. The topology needs ComputeNodes*ClientsPerNode <= 65535.
//
// # Verbs
//
// A verb is a few CPU instructions on the mapping, so a batch runs in the caller, op by op in
// batch order, and is done when Post returns: order within a batch and across a client's batches
// holds trivially. Words go through sync/atomic (internal/wordmem): aligned 8-byte accesses
// never tear, longer ones copy word by word, and partial words are merged with a CAS. Verbs to a
// compute node check its lease first (a load and a clock read). Every access to the mapping
// runs under atomics.Guard: if another process truncates a /dev/shm file, the verb that faults
// returns an error wrapping farmem.ErrNodeDown and atomics.ErrFault, and the process lives (a
// memfd cannot be truncated: it is sealed).
//
// # Policies and latency
//
// [Coherent] uses plain loads, stores and LOCK-prefixed atomics. [Uncached] follows the
// discipline of a multi-host pool without hardware coherence (DESIGN §4): write back and fence
// after writes, flush before reads, atomics assumed to execute at the device (each flushes its
// line before and writes it back after). On one coherent host it reproduces the cost of that
// discipline, not its failure modes: a missing flush cannot produce a stale read here.
//
// A latency profile ([OpenOptions.Profile], or the one a placement fell back from) is injected
// with numaemu's calibrated spinning delay: the profile's latency less local DRAM's
// (numaemu.Profile.Added) is charged once per verb (every op of a batch, as each is a dependent
// access to the device; bandwidth is not modelled), and once per mailbox chunk each way of a
// Call, by the caller. Wait is not charged.
//
// # Wait and Call
//
// Compute regions live in the shared mapping, so peers reach them with ordinary verbs. Wait
// sleeps on a futex (FUTEX_WAIT, shared, on a 32-bit word): the word's wake bucket, one of 64 in
// the node's control block, has a sequence and a waiter count; every verb that writes a compute
// node's region, in any process, bumps and wakes the buckets of the words it wrote that have
// waiters. The wake latency is the futex's; nothing polls. (A sleeping Wait re-checks once per
// down timeout all the same: that is the one way it can end if its wake-up was lost because the
// page holding the futex word vanished, as in a truncated file.)
//
// Call goes through mailboxes in the target's control block: a caller claims a free mailbox
// with a CAS on its owner word, writes the request (in chunks of the mailbox size, up to
// farmem.MaxCallBytes), moves the mailbox's state word and rings the target's doorbell; the
// target's dispatcher hands the request to a handler goroutine (at most MaxHandlers at once, on
// the client slots reserved for them; handlers may make nested Calls), which writes the reply
// the same way. Each side spins for a few microseconds (yielding) and then sleeps on the state
// word's futex (a goroutine blocked in a system call holds its P until the runtime's sysmon
// retakes it, which a handler goroutine of the same process would wait for). The state word
// carries a sequence
// advanced at every claim and forced free, so a party with a stale view fails its next CAS. A
// caller waiting on a target checks the target's lease on every wake-up and its process every
// quarter of the down timeout: a call to a dead node fails with ErrNodeDown within the down
// timeout. A caller that gives up frees its mailbox, or flags it for the target to free; a dead
// caller's mailbox is freed by the target (when it finds the caller gone, or at its next lease
// renewal) or by any caller that finds no free mailbox.
//
// Futexes and pids work only among processes under one kernel: Wait and Call wake-ups, and
// fast death detection, do not cross hosts. Leases do, given synchronized clocks.
//
// # Faults
//
// [Fabric] implements [transport.FaultInjector] over this process's view of the region (shared by
// all its handles): a compute node attached by this process can be crashed (for every process:
// its lease is marked crashed) and hung (it stops serving Calls and renewing its lease); memory
// nodes can be crashed, hung, partitioned from a client or armed to crash mid-batch, as seen by
// this process's handles (a memory node has no process to stop); clients of this process can be
// crashed. What needs another process (crashing its compute node or clients) returns an error
// wrapping farmem.ErrNotSupported; tests kill that process instead.
//
// When the last handle on a region closes, the mapping is replaced by an inaccessible
// reservation of the same addresses rather than unmapped, so a straggling goroutine faults
// (and Guard reports it) instead of writing into a later mapping.
//
// The transport is built from the kit in farmem/transport: Options embeds transport.Shape, a
// Fabric's clients come from a transport.Registry and embed transport.ClientState.
package cxl
