// Package lincheck records histories of concurrent operations with fabric-clock timestamps and
// checks them for linearizability with porcupine (github.com/anishathalye/porcupine). Every
// concurrent structure of farmem is tested this way, on the local transport and on the
// simulator.
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
// Recording takes no shared lock (each recorder appends to its own buffer, about 200ns and 128
// bytes an operation for the KV model), so it can stay on in stress tests. Timestamps come from
// the fabric clock, so histories on the simulator are exact in virtual time. Call must precede
// the operation's first verb and End follow its last; intervals that touch are concurrent.
//
// # Outcomes
//
// An operation ends OK ([Op.Return]: its output is checked), Done ([Op.Done]: not checked),
// Failed ([Op.Fail]: certainly no effect, left out) or Unknown ([Op.Unknown]: it may or may not
// have taken effect; so is an operation that never ended). [Op.End] classifies an error with
// [Classify]: ErrNodeDown, ErrClosed and context errors are Unknown, and so is any other error
// unless the caller names it definite ([Rejections] lists the sentinels of verbs rejected
// unapplied). Treating an error as Unknown is always sound, only weaker. Results such as
// "exists" or "missing" are outputs, not errors.
//
// An Unknown operation is given a return time after every other operation of its partition and
// an output the model accepts, so it is checked as "took effect atomically at some instant after
// its call, or not at all"; a structure whose crashed operation leaves a torn state fails, which
// is what crash consistency means here. Unknown reads are dropped. Each open write widens the
// search: dozens per partition are fine, hundreds may time out, so a test should stop a client
// after a few unknown outcomes.
//
// # Models
//
// [Register] (read, write, CAS per key), [KV] and [KVAtomicScans] (a map whose invalid
// operations return KVExists or KVMissing, plus range scans), [MaxRegister], [Set] and [Counter]
// (fetch-and-add and read, for checking a lock). [NewModel] builds others from a deterministic
// [Spec]. Histories are partitioned per key, so 40,000 map operations over 256 keys check in
// about 0.1s.
//
// # Scans
//
// A scan covers [from, last key returned] if it hit its limit, else its whole range. [KV]
// checks each key a scan covers as a get linearized at some instant within the scan (each key
// its own instant): what a scan that reads leaves one after another can promise. It may not
// return a value never written or overwritten before it began, nor miss a key present and
// unmodified throughout. [KVAtomicScans] linearizes each scan at one instant; keys joined by
// overlapping scan ranges form one partition.
//
// # Failures
//
// [History.Check] fails the test unless the history is linearizable; [History.Verify] returns
// a [*Violation]. A checker timeout ([Timeout], default 30s) is a failure, never a pass. A
// report names the smallest failing partition, shrinks it to a small counterexample, lists its
// operations with clients, times, inputs and outputs, marks those that cannot go next, and
// writes porcupine's HTML visualizations under the directory the EnvDir variable names, else
// the test's artifact directory.
package lincheck
