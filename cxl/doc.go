// Package cxl is the memory-mapped far-memory transport: a region that several OS processes
// map and share, as compute nodes sharing a CXL memory device would, served as a
// [farmem.Fabric] with no server to start.
//
// # Regions
//
// [Create] makes a region once: a sealed memfd (empty path), a file on /dev/shm, hugetlbfs or a
// DAX file system ([ErrNotDAX] if it is not one), or a device-DAX instance. Files are formatted
// under a temporary name and renamed into place, so no process opens half a region. Memory is
// placed through numaemu ([Options.Placement]); DAX memory is the device's. [CreateTemp] makes
// a named region that disappears with its creator's handle. Creating and populating takes about
// a millisecond per MiB, attaching a fraction of one, and a verb tens of nanoseconds.
//
// Other processes open the region by path: [Open], or [OpenRegion] then [Region.Attach]. A
// memfd is reached through the creator's /proc/<pid>/fd/<n> ([Region.Path]; same user, while
// the creator keeps it open) or an inherited descriptor. Handles on one file in a process share
// one mapping. OpenRegion validates the header (magic, version, checksum, recomputed layout)
// before mapping and writes nothing to a file that fails.
//
// # Layout and nodes
//
// A region holds a header, the compute-id table, each compute id's region (farmem's layout)
// and control block, then the memory nodes, one page-aligned partition each (ids 1..MemoryNodes).
// Offset 0 of a memory node belongs to alloc's header; this package's control data lie outside
// every range a verb can reach.
//
// A compute node is a [Fabric] handle: each [Region.Attach] claims the lowest free compute id
// with a CAS on its lease word, so a process may act as several compute nodes. The lease runs
// for the down timeout in Unix wall-clock time and is renewed every quarter of it; Close
// releases the id. A dead process's ids expire with their leases, or at once on the same host
// when its pid is found dead; the checker fences the id, and the next Attach reclaims it,
// zeroing its region. A live process whose lease was fenced crashes its node itself at its next
// renewal. The [farmem.Topology] is static; a compute id no process holds is down
// (farmem.ErrNodeDown). ComputeNodes*ClientsPerNode is at most 65535.
//
// # Verbs
//
// A batch runs in the caller, op by op in order, and is done when Post returns. Words go through
// sync/atomic: aligned 8-byte accesses never tear, longer ones copy word by word (in aligned
// 16-byte pairs on CPUs that make those atomic: see atomics.Features.Wide), partial words
// merge with a CAS. Before an inline batch runs, its reads and atomics ask the CPU for their lines
// (atomics.Prefetch, a hint that never faults), so that a batch's independent cache misses (a
// lookup's two buckets and header, a block's lines) overlap instead of following one another;
// a client also offers Prefetch(addr, n), the same hint for a structure that learns an address
// some way ahead of the batch that reads it (ds/race uses it), which costs no verb, and
// DoHinted(ctx, batch), Do for a batch whose lines were hinted so (it does not ask again).
// Verbs to a compute node check its lease first. Every access runs under a fault guard
// (debug.SetPanicOnFault, one per batch, the caller's setting restored after it): if another
// process truncates a /dev/shm file, the faulting verb returns an error wrapping
// farmem.ErrNodeDown and atomics.ErrFault, and the process lives. A plain batch (signaled
// verbs of memory nodes only: a lookup's, an update's, an update's invalidation with its CAS)
// and a single signaled verb of a memory node take a shorter path when no policy applies
// (Coherent, no injected latency, no fault set): the batch is checked, tallied and hinted in one
// walk, counted from the tally by the client's goroutine alone (transport.Counters' own words:
// no locked instruction) before it runs, and applied in a second walk, with no call per op but
// the copies; only what depends on outcomes (failed comparisons, a fault's lost bytes) is
// counted after.
//
// # Policies and latency
//
// [Coherent] uses plain loads, stores and locked atomics. [Uncached] follows the discipline of
// a multi-host pool without hardware coherence (write back and fence after writes, flush before
// reads, atomics at the device); on one coherent host it reproduces that discipline's cost, not
// its failure modes. A latency profile ([OpenOptions.Profile]) adds numaemu's calibrated delay,
// the profile's latency less local DRAM's, once per verb and once per mailbox chunk of a Call;
// bandwidth is not modelled and Wait is not charged.
//
// # Wait and Call
//
// Wait sleeps on a futex in one of the node's 64 wake buckets; every verb that writes a compute
// node's region, in any process, wakes the buckets of the words it wrote that have waiters, so
// nothing polls (a sleeping Wait still re-checks once per down timeout). Call claims a mailbox
// in the target's control block with a CAS, writes the request in chunks, and rings the
// target's doorbell; at most MaxHandlers handlers run at once and may make nested Calls. Each
// side spins briefly, then sleeps on a futex. A call to a dead node fails with ErrNodeDown
// within the down timeout, and a dead party's mailbox is freed by the other side or by any
// caller that finds none free.
//
// A one-way message (Send) goes through a mailbox like a Call's request, flagged one-way in its
// meta word: the dispatcher takes it without a handler client, queues it in the node's
// transport.Inbox (a FIFO lane per sender, bounded by transport.InboxMessages and
// transport.InboxBytes; while it is full the mailbox waits, and so does the sender) and answers
// an empty reply at once, which frees the mailbox. So Send waits for the hand-over, a few
// microseconds, never for the handler, and one client's messages to a node run in the order
// sent. Futexes and pids work only under one kernel: wake-ups and fast
// death detection do not cross hosts; leases do, given synchronized clocks.
//
// # Faults
//
// [Fabric] implements [transport.FaultInjector] over this process's view of the region:
// compute nodes it attached can be crashed (for every process) and hung; memory nodes crashed,
// hung, partitioned or armed to crash mid-batch as this process sees them; its clients crashed.
// Faults needing another process return an error wrapping farmem.ErrNotSupported. When the last
// handle closes, the mapping is replaced by an inaccessible reservation, so a straggling
// goroutine faults (and Guard reports it) instead of writing into a later mapping.
package cxl
