// Package lincheck records histories of concurrent operations with fabric-clock timestamps and
// checks them for linearizability with porcupine (github.com/anishathalye/porcupine). Every
// concurrent structure of farmem is tested this way, on the local transport and on the
// simulator.
//
// # Use
//
// A test picks a model, opens a history on the fabric's runtime, gives each client goroutine
// its own recorder, brackets every operation with Call and End, and checks:
//
//	kv := lincheck.KV[uint64, uint64]()
//	h := kv.NewHistory(f.Runtime())
//	// in each client goroutine, with its Memory m:
//	c := h.Client(int(m.Info().ID))
//	op := c.Call(kv.Get(k))
//	v, found, err := store.Get(ctx, k)
//	out := kv.Found(v)
//	if !found {
//		out = kv.Missing()
//	}
//	op.End(out, err) // ok, or unknown outcome on ErrNodeDown or a context error
//	// after the clients are done:
//	h.Check(t)
//
// Recording takes no shared lock: each recorder appends to its own chunked buffer (about 200ns
// and 128 bytes an operation for the KV model), so it can stay on in stress tests. Timestamps
// come from the fabric clock ([farmem.Runtime.Now]); on the wall-clock runtime of real
// transports it is read monotonically, and on the simulator histories are exact in virtual
// time. Call must be made before the operation's first verb is issued and End after its last
// one returned; operations whose intervals touch or overlap are concurrent (closed intervals).
//
// # Outcomes
//
// An operation ends in one of four ways ([Outcome]):
//   - OK ([Op.Return]): it returned; its output is checked and its effect took place at one
//     instant between its call and its return.
//   - Done ([Op.Done]): as OK, but the output is not checked (a blind set add).
//   - Failed ([Op.Fail]): it certainly had no effect; it is left out of the history.
//   - Unknown ([Op.Unknown]): it may or may not have taken effect, because it failed with
//     farmem.ErrNodeDown or a context error, its client crashed, or it never ended (a pending
//     operation counts as Unknown, so a history may be checked while clients still run, and a
//     client abandoned mid-operation needs no special handling).
//
// [Op.End] classifies an error with [Classify]: ErrNodeDown, ErrClosed and context errors are
// Unknown whatever else they wrap; any other error is Unknown too unless the caller names it as
// definite ([Rejections] holds the sentinels with which a single verb is rejected unapplied).
// Treating an error as Unknown is always sound, only weaker; treating it as Failed when the
// operation did take effect makes a correct structure fail. Results such as "exists" or
// "missing" are outputs, not errors: map them to outputs before End.
//
// How unknown outcomes are checked: porcupine has no pending operations, so an Unknown
// operation is given a return time after every other operation of its partition and an output
// that the model accepts whatever it is. It may then be linearized at any instant after its
// call. Being linearized after every other operation is the same as never taking effect, since
// nothing observes it, so "took effect at some instant after its call, or not at all" is
// exactly what is checked. Models are deterministic ([Spec.Apply]): an Unknown write, CAS,
// insert or delete changes the state as the model says at the point where it is linearized (a
// CAS succeeds there iff the state holds its expected value). An Unknown read-only operation
// tells nothing and is dropped. Operations of a client with an unknown outcome may take effect
// after that client's later operations: far memory gives no ordering between a timed-out verb
// and the next. Each open write widens the search (porcupine may try it at every point), so a
// test should stop a client after a few unknown outcomes, as a client that believes a node
// down would; dozens of open writes per partition are fine, hundreds may time out.
//
// The model asks that an operation with an unknown outcome takes effect atomically or not at
// all: a structure whose crashed operation leaves a torn state behind fails the check, which is
// what crash consistency means here.
//
// # Models
//
// [Register] (read, write, CAS; one register per key), [KV] and [KVAtomicScans] (a map whose
// operations return their invalid-operation results: insert of a present key fails with
// KVExists, update or delete of an absent key with KVMissing, get of an absent key returns
// KVMissing, put always succeeds; plus range scans), [MaxRegister] (write-max and read, over any
// order), [Set] (add, remove, contains with boolean results) and [Counter] (fetch-and-add and
// read, the model to check a lock with: a critical section that increments non-atomically).
// [NewModel] builds others from a deterministic [Spec]. Histories are partitioned per key (per
// element for the set), so large histories check fast: 40,000 map operations over 256 keys take
// about 0.1s.
//
// # Scans
//
// A scan input names a range [from, to) (or [from, ...)) and a limit; its output is the pairs it
// returned. A scan that hit its limit covers [from, last key returned]; one that did not covers
// its whole range. Two specifications:
//
//   - [KV] checks scans per key. The output must be strictly ascending, inside the range and
//     within the limit; and for every key in the covered range that the history knows (a key
//     any other operation names, or any scan returned), the scan's report about it, its value
//     or its absence, must be what a get linearized at some instant within the scan's interval
//     would return. Each key has its own instant. So a scan may see a later write to one key and
//     miss an earlier write to another, but it may not return a value never written, a stale
//     value overwritten before it began, a key deleted before it began, or miss a key present
//     and unmodified throughout. This is what a scan that reads leaves one after another can
//     promise (Dolphin's). It is checked by rewriting each scan into those gets, per key.
//   - [KVAtomicScans] checks each scan as one operation over the map, linearized at one
//     instant. Such a scan cannot be partitioned per key: keys connected by overlapping scan
//     ranges form one partition (whose state is the map restricted to them), and every other
//     key its own, so scans over small ranges still check fast.
//
// # Failures
//
// [History.Check] fails the test (t.Fatal) unless the history is linearizable; [History.Verify]
// returns a [*Violation] instead. A checker timeout ([Timeout], default 30s) is a failure
// (ErrTimeout), never a pass. A violation report names the smallest failing partition, shrinks
// it to a small counterexample by steps that keep a legal history legal (cutting the history at
// the first event after which it is not linearizable, starting it later from the only state the
// earlier operations can leave, and dropping completed reads), lists its operations with their
// client, times (relative to the first call), inputs and outputs, marks the ones that cannot go
// next with what the model would return, and writes porcupine's HTML visualizations of the
// counterexample and of the whole partition. Check writes them under the directory the EnvDir variable names, or
// else the test's artifact directory (kept with go test -artifacts), and prints their paths.
package lincheck
