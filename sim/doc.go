// Package sim is a deterministic virtual-time cluster: it runs the real structures of ds/ and
// kvstore/ (written against farmem.Memory and farmem.Runtime only) unchanged, with hundreds of
// clients whose NICs and CPUs saturate, so that the papers' experiments can be reproduced as
// ratios and curve shapes, and faults replayed exactly.
//
// # Use
//
//	s, err := sim.New(sim.ConnectX6(), seed) // a Model and a seed
//	defer s.Close()
//
// A *Sim is a farmem.Fabric hosting every compute node, and a transport.FaultInjector. Run a
// program inside it with Run, which runs f in the calling goroutine while virtual time passes:
//
//	s.Run(func() {
//		m, _ := s.Open(ctx, farmem.ComputeID(1).Node())
//		g := s.NewGroup()
//		for i := range 8 {
//			g.Go(func() { ... m.FAA(ctx, a, 1) ... })
//		}
//		_ = g.Wait()
//	})
//
// or a load: RunClosedLoop (closed-loop clients with think time) and RunOpenLoop (a Poisson
// generator), which open the clients, call a StartFunc per client to build its operation, and
// return a LoadResult (throughput, HDR latency histogram, per-client counts, and a Report of
// the fabric's counters over the measured window). Report and ResetStats give per-client,
// per-NIC and per-core counters, utilisation and queueing delay at any time.
//
// # Virtual time and scheduling
//
// Time is virtual, in nanoseconds from Epoch. Exactly one simulated goroutine runs at a time;
// a goroutine that blocks in the simulator (a verb, Wait, Sleep, Pending.Wait, Group.Wait)
// runs the due events itself and hands control straight to the next goroutine to resume, in
// timestamp order, ties broken by the seed. A run is therefore a pure function of (model, seed,
// program) when the program runs inside the simulation: under Run, or as a sequence of calls
// from one goroutine outside it (each such call returns only once the simulation is quiet; a
// call from another goroutine while a Run is going on therefore waits for it to end).
//
// The runtime of every client (m.Runtime()) and of the fabric (s.Runtime()) is the
// simulation's: Now is virtual, Sleep and AfterFunc wait in virtual time, WithTimeout returns
// a context whose Done channel closes at a virtual deadline inside the simulation, Go starts a
// simulated goroutine, Rand and NewRand are seeded from the seed, and a client runtime's
// Compute(d) queues d of work on its compute node's cores. With Model.ClockOffset or
// Model.ClockDrift, each client reads its own clock (an offset and a drift drawn from the seed
// and its client id, see Sim.ClockOf): its Now, and the durations it sleeps, waits in
// AfterFunc and gives WithTimeout, are on that clock, while the fabric's runtime, Sim.Now, At
// and reports keep true virtual time.
//
// Rules for code inside the simulation: block only in the simulator. A goroutine blocked on a
// sync.WaitGroup, a channel or a contended mutex holds the simulator still; use Group (or a
// farmem Wait on a word) to wait for simulated goroutines. Virtual time advances only while
// someone waits in the simulator: Run's goroutine, or a goroutine from outside inside a
// blocking call. From outside, wait for simulated goroutines with Group.Wait or a Sleep loop on
// the runtime; a sync.WaitGroup wait works only through a wall-clock watchdog that is slow and
// not deterministic. A context that the simulation itself cancels must come from
// Sim.WithCancel (or a runtime's WithTimeout): a standard context.WithCancel canceled inside
// reaches the goroutines parked on it through a goroutine of the context package, at a
// virtual time that depends on the host's scheduling, and the run is no longer deterministic.
//
// # The model
//
// See Model: one-way link latencies, NICs with a per-verb service time, a port bandwidth, a
// FIFO queue in front of their processing units and an atomic unit serializing atomics to one
// word, and compute nodes with k cores on which client CPU per op, Call handling and
// Compute(d) queue (a Call's handler runs on the callee's cores: its CallCPU, its Compute and
// the CPU of its verbs queue there, behind the callee's clients and other handlers). A verb
// takes effect at its target when its service starts there (an atomic when it gets its word),
// and its answer leaves when its service ends. A verb to the caller's own compute node's
// region is a CPU access (Model.LocalAccess, OpCPU when that is zero), unless it is an atomic
// to a word that a client of another compute node has reached with a NIC atomic: such a word
// is NIC-reached for the rest of the run, and its owner's atomics on it loop through its own
// NIC, since a NIC's atomics are not atomic with the CPU's. Ops of one client
// to one node take effect in posting order. Reads and writes longer than 8 bytes are applied
// in pieces, in random order, across their service when Model.Tearing (or SetTearing on a
// node) is on, so concurrent ones tear for real.
//
// A one-way message (Send) is a Call with no reply leg: its request crosses the sender's NIC,
// the link and the target's NIC as a Call's does, and then runs on the target's handler clients
// (the same CallCPU and queue), one at a time per sender in the order sent (arrivals of one
// sender's messages to one node are kept in order whatever the jitter). Send returns after the
// sender's OpCPU and does not wait for the message. A node holds at most
// transport.InboxMessages messages sent to it and not finished; a sender that finds it full
// parks in virtual time. A message to a crashed or unreachable node is dropped.
//
// # Speed
//
// The simulation is sequential: a second P only spins and wakes, so experiments run fastest
// with GOMAXPROCS=1 (go test -cpu 1). Measure with
//
//	go test -run '^$' -bench 'Verbs(8|512)$' -cpu 1 ./sim/
//
// BenchmarkVerbs512 runs 512 closed-loop clients; BenchmarkVerbs8 runs the same load on 8,
// whose state stays in the core's caches, so it gives what a verb costs in instructions, and
// the difference between the two is what 512 clients' cache misses cost. A simulated verb costs
// two events (its arrival at the target and its answer; a third when it waits for a busy NIC or
// atomic unit), one switch of simulated goroutine, and about 2,900 instructions (cachegrind,
// the benchmark's marginal cost per verb: 2,775 before the stack prefetch below). With hundreds
// of clients its time goes less to instructions than to cache misses: what a verb touches that
// is its client's own (its goroutine's stack and descriptor, its client, group and queue pair,
// its load client) was last touched one verb of every other client ago, and the other clients'
// state has evicted it from the core's L2 in between; the word it reads or writes is one of
// megabytes of simulated memory, touched at random. How much those misses cost depends on the
// machine more than anything else here does: on an Intel Xeon VM (Sapphire Rapids class, 2 MiB
// of L2 a core) a dependent load that misses L2 took 39-48 ns (a working set of 3-8 MiB) and
// 120-310 ns past 16 MiB (memory, and page walks that nested paging lengthens), and before the
// prefetch of stacks below the benchmark took 355 ns of CPU a verb with 8 clients and 650 with
// 512; on the AMD EPYC VM the earlier figures came from, 512 clients took 370.
//
// The layout, so that a verb touches few lines and the simulated order of events stays the
// same: due events run on the driver's stack (one stack, warm) rather than on the stack of the
// proc that blocked; the event wheel's buckets are 4-byte heads of lists of 32-byte nodes
// recycled through a free list, and pop hands its event back in registers; histograms count in
// place, indexed as the HDR library indexes them, and hand their counts to the library only on
// export; a client's and a group's hot fields share lines, a one-op group's hot paths read its
// op and results from its own arrays rather than through its slice headers, the single verbs
// call single directly (no runner, no copies of the op from frame to frame), single's rare
// paths are calls that keep its frame small, a load client fits one line. cachegrind, with a
// last level of 1 MiB and the benchmark's marginal cost per verb, counted 3,010 instructions
// and 73 misses per verb before that layout, 2,740 and 42 after it.
//
// The misses left are made to overlap instead of coming one after the other (hints, with no
// effect on the run):
//   - A verb, when it leaves its client, prefetches the word it will reach, so that its arrival,
//     hundreds of verbs later, finds the word cached; a node's memory of 2 MiB or more is
//     aligned to, and advised for, transparent huge pages (newWords), so that that prefetch
//     and the access seldom walk the page tables (the benchmark's 32 MiB of node memory is
//     8,192 pages of 4 KiB, far more than a TLB holds, and 16 of 2 MiB).
//   - Before the driver resumes a proc, it prefetches the proc's goroutine descriptor and the
//     stack lines the proc returns through first (prefetchResume: 256 bytes under the frame it
//     blocked in, 768 above, short of the stack's end, which block reads from the runtime's
//     descriptor when stackHints found that read consistent). Without it the switch and the
//     returns up the cold stack took their misses one at a time: the benchmark's profile put
//     40 ns a verb on the first load from the verb's frame after the switch. A wider window
//     was slower: every prefetch in flight holds one of the core's few miss buffers.
//   - The driver stands in for the coroutines it resumes (Sim.stand) from its first resume to
//     the end of its drive, rather than setting and clearing it around each switch: two atomic
//     exchanges (full barriers, which wait for the stores before them) fewer per verb.
//
// On the Xeon, side by side with the code before these three (-count 5 each, alternating), CPU
// per verb went from 649 to 543 ns with 512 clients (-16%) and from 1,045 to 928 ns for
// BenchmarkBatchedVerbs512 (-11%), and stayed at 355 ns with 8 clients. Where it goes now
// (pprof of 2*10^7 verbs with GODEBUG=asyncpreemptoff=1, flat CPU per verb grouped by part,
// 8 clients / 512 before / 512 after): the coroutine switch (runtime.coroswitch, its three
// compare-and-swaps per switch, iter.Pull) 65 / 105 / 81 ns; the fabric model (send, arrive,
// serve, apply, deliver, the NIC and CPU queues) 67 / 131 / 137; the client's verb path and
// its transport.Counters 56 / 135 / 63; the load loop and the benchmark's closure 36 / 83 / 73;
// the scheduler 35 / 56 / 47; the event queue 44 / 43 / 49; the prefetches 10 / 16 / 34. Without
// GODEBUG a tenth of the samples land on runtime.asyncPreempt's first instruction, spread over
// every caller: the runtime preempts the benchmark's goroutine about 70 times a second (it
// never enters the scheduler), and a profiling signal taken in the same tick is charged there;
// CPU per verb with 8 clients is the same with the preemption off.
//
// What is left, against issue 28's 500 ns a verb at 512 clients: on the Xeon, under a load of
// 5-8 from other jobs, 520-560 ns (one quieter run of 2*10^7 verbs: 490). Of it 340-355 ns is
// the verb's instructions (BenchmarkVerbs8), of which the coroutine switch is a fifth (two
// coroutine switches per proc switch, through iter.Pull; a direct switch between coroutines
// would halve it) and transport.Counters' atomic additions about 5%; the rest, about 180 ns,
// is the misses still taken (the profile's growth from 8 clients to 512): the fabric model's
// (+70 ns: the group, queue pair, NIC and CPU-queue lines, each reached through a pointer in
// the one before), the load loop's frame and closure (+37), the prefetches themselves (+24:
// a prefetch waits for a free miss buffer), the switch (+17) and the scheduler (+13).
//
// # Faults
//
// Crash, Hang, Resume, Partition, Heal, CrashAfter and CrashClient (transport.FaultInjector),
// plus PauseClient/ResumeClient, DelayLink, CutLink/HealLink and SetTearing. Called inside the
// simulation (in a goroutine scheduled with At, say) a fault happens at an exact virtual time,
// so a fault schedule replays exactly. A hung compute node is paused as a whole; silent nodes
// and links make ops fail with ErrNodeDown after Model.DownTimeout of virtual time. An op is
// never applied after it is reported failed: a request that reaches a silent node is dropped
// for good (not held for after Resume), and one whose answer a cut link loses was applied before
// its failure is reported. A Pending's completion hook (farmem.Pending.Then) runs as a
// simulated goroutine, so quorum waits and their stragglers replay exactly too.
//
// The simulator is built from the kit in farmem/transport, as every transport is: Model embeds
// transport.Shape, and clients come from a transport.Registry; its scheduler, its Parker and
// its pipeline of NICs and links are its own.
package sim
