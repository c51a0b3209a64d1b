// Package race is RACE hashing (Zuo et al., ATC'21) over far memory: a lock-free extendible
// hash table that clients reach with one-sided verbs only. It is the index under CIDER, FlexKV
// and SWARM-KV in this module: keys and values are byte strings, and the final pointer change
// of Update and Delete is delegated to a ptrsync.Synchronizer, so that ds/cider can put its
// locks behind the same table.
//
// # Use
//
// One client builds the table with Create, which returns the root address; every client (one
// goroutine with its own farmem.Memory and alloc.Allocator) opens its own handle on that root
// with Open. Handles share nothing but far memory.
//
//	root, err := race.Create(ctx, m, a, race.Params{})
//	t, err := race.Open(ctx, m, a, root, race.Options{})
//	err = t.Insert(ctx, key, value)   // ErrExists if present
//	v, err := t.Search(ctx, key)      // ErrNotFound if absent
//	err = t.Update(ctx, key, value)   // ErrNotFound if absent
//	err = t.Delete(ctx, key)          // ErrNotFound if absent
//
// Every operation is linearizable (checked with farmem/lincheck on the local transport with
// tearing, jitter and strict mode, and on the simulator with paused and crashed clients, with
// keys forced into collisions, the table splitting and doubling its directory during the run,
// and a client dying in the middle of a split). Table.Audit checks a quiescent table's
// invariants (every key in a subtable that covers it, in one of its candidate slots, once).
// An operation that fails with a transport error (farmem.ErrNodeDown, a context error) may or
// may not have taken effect.
//
// # Memory layout
//
// Words are little-endian. "Packed" addresses are 46 bits: a memory node id (8 bits, 1..255)
// above an offset in 64-byte Units (38 bits, below 16 TiB). Everything the table allocates is
// 64-byte aligned; an address that does not fit is refused with ErrPointerRange.
//
// Root (RootSize = 128 bytes, the address Create returns):
//
//	0    magic "farmRACE"
//	8    layout version (8 bits) | slots per bucket << 8 | fingerprint bits << 16 |
//	     metadata bytes per slot << 24 | max depth << 40 | initial depth << 48
//	16   bucket groups per subtable
//	24   hash seed
//	32   checksum of the 32 bytes above
//	40   directory word (atomic): packed directory address | global depth << 56
//	48   directory lock (atomic, a lock word)
//	56   splits completed (atomic, FAA)
//	64   directory doublings (atomic, FAA)
//
// Directory: 2^globalDepth words; entry j is a packed subtable address | that subtable's depth
// << 56, for the keys whose first hash has low bits j. It is only a hint (see Resizing).
//
// Subtable (one allocation on one node): a 320-byte header area, the slots, the metadata.
//
//	0    header word (atomic): local depth << 56 | suffix (the low depth bits of the first
//	     hash of every key the subtable holds)
//	8    split lock (atomic, a lock word; 1 means "held by the parent's split")
//	16   parent: packed address of the subtable this one was split from (0 for initial ones)
//	32+8l child word for depth l (atomic): packed address of the half split off when this
//	     subtable split at depth l | 1<<63 once that split finished
//	320  slots: Groups bucket groups of 3 buckets (main, overflow, main) of SlotsPerBucket
//	     8-byte slots; slot i at 320 + 8i
//	then per-slot metadata (the synchronizer's lock entries): MetaSize bytes for slot i at
//	     align16(320 + 8*slots) + MetaSize*i, zero in a new subtable
//
// Lock words: 0 free; otherwise the holder's client id << 48 | its lease deadline in units of
// 2^16 ns of fabric time.
//
// Slot word (see Slot): fingerprint (8 bits) << 56 | block length in Units (8 bits) << 48 |
// frozen << 47 | tentative << 46 | packed block address. 0 is an empty slot.
//
// KV block (see DecodeBlock), out of place, written once and never changed while a slot can
// name it: key length (16 bits), 0 (16 bits), value length (32 bits), an insert lease deadline
// (64 bits), the key, the value, zero padding to 8 bytes, and a checksum of all of it and the
// block's address. A block is at most 255 Units (MaxBlockSize), so len(key)+len(value) is at
// most MaxKV (16296 bytes) and a key at most MaxKey bytes.
//
// # Hashing and placement
//
// A key has two 64-bit hashes (the same function in every process). The low bits of the first
// choose the subtable (extendible hashing by suffix); its high 32 bits choose one main bucket
// and the low 32 bits of the second another; the top bits of the second are the fingerprint.
// Each choice is read as a combined bucket: the main bucket and the overflow bucket of its
// group, adjacent in memory, so the two candidates are two Reads in one batch. Bucket choice
// and fingerprint do not depend on the suffix, so a key keeps its slot index when its
// subtable splits. Insert takes a random empty slot of the candidate with more empty slots.
//
// # Operations
//
// A lookup reads both combined buckets and then, in the same batch, the subtable's header word
// (after the slots: same node, so in order). The result is used only if the header covers the
// key; otherwise the directory cache is stale and the client refreshes it (see Resizing). Then
// the blocks of the slots whose fingerprint matches are read and their keys compared; a block
// that fails its checksum makes the lookup start over.
//
// Search: the lookup; the value of the committed slot holding the key. It ignores tentative
// slots and reads frozen ones (a split in progress never blocks it). Linearized at the read of
// the slot it returns, or, when absent, at the header read.
//
// Insert: the KV block is written in the lookup's batch. If the key is absent it CASes an empty
// slot to the block's tentative word and re-reads the buckets and header in the same batch.
// Tentative words are invisible to Search, Update and Delete. Then, from the re-read:
//   - a committed slot of the key: the key exists; the tentative slot is retracted (CAS to 0);
//   - a tentative slot of the key at a lower slot index: that inserter wins; this one waits
//     (polling) until it commits or vanishes, and removes it (CAS to 0) once the lease in its
//     block has expired (its owner is dead or stalled; if it was merely slow it starts over);
//   - tentative slots of the key at higher indices lose: they are removed (CAS to 0); if one
//     turns out to have been committed meanwhile, the insert reads again;
//   - then it commits its slot with a CAS from the tentative to the committed word: the
//     linearization point. A commit that fails (removed by a competitor, frozen by a split)
//     starts the insert over with a new block.
//
// Why this is correct: of two inserters of one key, the one whose tentative CAS came second
// sees the other's slot in its re-read (the re-read follows its own CAS). If both see each
// other, the lower index commits and the higher waits; if only the second sees the first, it
// waits for it if the first is lower, and removes it if it is higher, before committing, and
// the first's commit then fails. So at most one committed slot ever holds a key, and Exists is
// returned only after a committed slot of the key was read. The re-read's header also catches
// a split that happened between the lookup and the tentative CAS: the tentative slot is then
// retracted, and since it was never visible nothing observed it. (RACE's published insert
// CASes the committed word at once and removes duplicates after the re-read; a reader can
// then see a duplicate whose inserter will report Exists, which is not linearizable.)
//
// Update and Delete: the lookup finds the committed slot of the key (Update writes its new
// block in the lookup's batch, unless the synchronizer's plan defers it); then the
// synchronizer's Commit changes the slot from the word read to the new block's word (Update) or
// to 0 (Delete). The replaced block is retired. A missing key is ErrNotFound, linearized at the
// lookup. ptrsync.Optimistic, the default synchronizer, is a CAS; when the CAS finds a newer
// block of the same key (confirmed by reading it) it CASes again, otherwise the operation looks
// again.
//
// What the table adds to ptrsync's contract: the slot word is the pointer (ptrsync.Target), and
// the key's identity for the synchronizer is ptrsync.KeyHash of the key bytes. A frozen word is
// never replaced: a split owns it, Same reports it is not the key's, and on Retry the table
// waits for the split. Install writes a deferred KV block in a round trip of its own (the block
// may sit on another node than the slot) and then CASes the slot; Same reads the word's block
// unless it is the word the table read (one round trip, none if this operation read it
// already), and reports false for frozen, tentative or empty words, for blocks that fail
// validation and past the deadline. Every slot CAS that finds another word counts in
// Stats.Conflicts.
//
// # ABA, versions and lock entries
//
// Slots carry no version. A slot word names its KV block, and blocks are freed only through the
// allocator's deferred free (alloc.Allocator.Retire), while every operation runs pinned
// (alloc.Allocator.Pin/Unpin): a block named by a word that a pinned client read cannot be
// reused until that client unpins, so a slot cannot hold that word again meanwhile. A CAS
// whose expected value is a word read in the same pinned operation therefore has no ABA
// problem, across any number of delete/insert cycles. To keep this true an operation checks,
// before each CAS that depends on what it read, that it has been pinned less than
// Options.PinBudget (below the allocator's lease minus its refresh and the clock skew), and
// otherwise re-pins and looks again. This answers CIDER's open questions Q5 and Q6 for this
// table: the slot needs no version bits; the per-slot lock entries live in a parallel array in
// each subtable (the Metadata above), at an address computed from the slot's, and are read
// with the KV blocks in the lookup's second round trip when the plan asks for a prefetch, so a
// synchronizer finds "the lock entry of this slot" with no round trip of its own
// (ptrsync.Target's Lock and LockBytes). A table keeps Params.MetaSize bytes per slot and
// refuses, at Open, a synchronizer whose LockSize is larger. A lock entry may carry its own
// version, as wide as its synchronizer likes; a synchronizer that waits on a lock must re-read
// or re-confirm the slot (Same) before its CAS, and may combine updates (Plan.DeferWrite: the
// table then lets Install write the new block, so only the last writer's block is written, and
// Outcome Combined tells the table that this change's block was never published); its Plan
// decides that, and whether to prefetch the entry, per operation. When a split moves a slot, its
// lock entry is not moved: the new slot's entry starts zero and every CAS on the old slot fails
// (it is frozen, then cleared).
//
// # Resizing
//
// A subtable splits when an insert finds both combined buckets of its key full. The splitter
// takes the subtable's split lock (a CAS; the word holds its client id and a lease deadline) and:
//
//  0. allocates the new half and, if publishing it may double the directory (its depth is at
//     least the global depth the client last saw), the doubled directory's block. Running out
//     of far memory is an ordinary outcome: the allocation fails before anything is frozen, the
//     lock is released, the insert fails with an error wrapping farmem.ErrNoSpace, and the table
//     is exactly as usable as before (every key readable, updatable, deletable), so the insert
//     can be retried once memory is freed. A handle keeps a reserved directory block until a
//     doubling uses it or Close frees it;
//  1. freezes every slot: a MaskedCAS setting the frozen bit, which returns the slot's final
//     value. Writers' CASes (which expect unfrozen words) now fail, and they wait; readers go on
//     reading frozen slots;
//  2. reads the blocks of the frozen committed slots to learn which keys move (bit d of their
//     first hash, d the subtable's depth) and writes the new half: depth d+1, suffix with bit
//     d set, split lock "held by parent", the moved slots at the same indices, every slot
//     frozen (empty ones too, so nothing can be inserted into it yet);
//  3. records the new half in its child word for depth d (a CAS);
//  4. publishes it in the directory, under the directory lock: the entries of the moved
//     suffixes that still name the old subtable now name the new half (doubling the
//     directory first if d is the global depth: a new directory of twice the entries, each a
//     copy, the root's directory word swung with a CAS, the old directory retired);
//  5. moves the old subtable's header to depth d+1 (a CAS; the client whose CAS succeeds counts
//     the split in the root);
//  6. releases the old subtable: moved keys' slots, tentative and empty ones become 0, the
//     others lose their frozen bit (CASes from the frozen values);
//  7. releases the new half: its slots lose their frozen bit and its lock becomes free, in one
//     ordered batch; finally the child word is marked done and the split lock released.
//
// Why readers stay correct: the header is read after the slots, and it moves (5) before any
// slot of the old subtable is cleared (6) and before the new half can diverge from the frozen
// copies (7). So a lookup whose header still covers the key read slots that the old subtable
// was still responsible for; a lookup that reads the new header retries. A frozen slot's value
// is current while it is frozen, since nobody can change it. Search never waits: it only ever
// reads.
//
// Stale directory caches: a client caches the directory. A header that does not cover the key
// tells it its cache is stale: it re-reads that entry together with the root's directory word
// (one round trip), and the whole directory if it was replaced by a doubling. The directory is
// a hint: every entry names the subtable covering its suffix or an ancestor of it, never
// anything else, since entries only ever move from a subtable to its child. If the refreshed
// entry still names the same subtable (the directory lags behind a split), the client walks
// child words from it to the subtable that covers the key (one round trip per hop), so a
// directory update that was delayed or lost (a client that stalled past its lease) costs round
// trips, never correctness or progress.
//
// Leases and dead splitters. Writers that meet frozen slots poll the subtable's split lock
// (with exponential backoff from Options.Backoff to 1ms). A holder renews its lease when half of
// it has run. Once a lease has expired (plus ClockSkew) a waiter takes the lock over with a CAS
// and finishes the split from what far memory shows: a child word not marked done for the
// current depth means steps 1-3 are done (continue at 4); one for the previous depth means
// step 5 is done (continue at 6; 7 only if the new half's lock is still "held by parent");
// frozen slots without a child mean the split stopped in 1-2 (start it again: freezing is
// idempotent and the new half is rebuilt; a half written but not recorded is leaked). A taker
// allocates as a starter does; only a taker that must double a directory the dead holder
// reserved memory for allocates after the freeze, and may then fail with ErrNoSpace, leaving
// the split for the next taker. Every
// step is idempotent, so a slow holder and its successor racing on the same step is harmless.
// A new half whose lock is "held by parent" is waited on, and taken over, through its parent.
// So if a splitter dies mid-split: searches go on unaffected; writes to the subtable (and to
// the new half) wait up to Options.Lease plus ClockSkew, then the first waiter finishes the
// split; nothing is lost (tested at each step). Like the allocator, leases assume clients'
// fabric clocks agree within ClockSkew and that a verb lands within ClockSkew of being posted;
// a client that stalls past its lease finds its renewal refused and stops (errors are
// internal: the operation that drove the split starts over).
//
// # Restarted memory nodes and stale pointers
//
// A memory node that restarts loses its memory (farmem.ErrNodeLost; the fabric fences it until
// it is adopted). Until then, an operation on a key whose subtable or KV block was there fails
// with an error wrapping farmem.ErrNodeLost, never with a wrong value or ErrNotFound: the
// buckets or the block cannot be read. A lookup whose other candidate blocks (fingerprint
// matches of other keys) are on a down or lost node still answers if it read the key's own
// block, since at most one committed slot holds a key. Table.Purge, after adoption, empties
// every slot that names a block in the lost memory (reporting each committed one by its slot,
// fingerprint and subtable suffix: the key's bytes were in the block) and replaces each lost
// subtable by an empty one of the same depth and suffix in the directory and in its parent's
// child word, reporting it as lost with an unknown number of keys. The root and the directory
// are the table's single point of failure: if either was on the node, Purge fails and the
// table is lost. Directories are allocated on the root's node when it has room, so that this
// is one node. Table.Locate reports where a key's slot and block live, for tools and tests.
//
// How a stale pointer is kept from being followed into re-used memory: the adopted node's
// memory is handed out again from its start, so an address cached from before may now hold
// other data. (1) KV blocks: a block is used only after its checksum, which covers its own
// address, and its key compare; bytes that are anything else fail validation and the lookup
// starts over, so a stale slot word can never produce a value. (2) Subtables: a handle's cached
// directory is reloaded whenever the fabric has adopted a node since it was loaded
// (farmem.Restarts.Adoptions, one atomic load per operation), so no lookup starts from a lost
// subtable's address; Purge rewrites the directory entries and child words that named one,
// so no walk reaches it either. (3) A slot Purge has not reached yet is only ever read by a
// client whose own fabric has adopted the node, and its block fails (1). What is not
// defended: an operation in flight across the adoption (it read the directory before, and
// touches the node after) may act on a replacement subtable's words as if they were the lost
// one's; adoption is meant for a quiet store, as the kvstore doc says.
//
// # Costs
//
// Round trips per operation, uncontended, as the package's tests assert them exactly with
// farmem.Stats deltas (the allocator's pins and retires cost none within its Refresh period):
//
//	Search, key present        2   (both combined buckets + header; the KV block)
//	Search, key absent         1   (2 if some slot has the key's fingerprint)
//	Insert                     3   (block write ∥ lookup; tentative CAS ∥ re-read; commit CAS)
//	Insert, fingerprint match  4   (the matching slot's block is read after the lookup)
//	Insert, key exists         2
//	Update (Optimistic)        3   (block write ∥ lookup; the key's block; CAS)
//	Delete (Optimistic)        3   (lookup; the key's block; CAS)
//	Update/Delete, key absent  1   (2 with a fingerprint match)
//	Open                       2   (root; directory), plus a pin
//
// Insert CASes twice; Update and Delete once; Search never. A stale directory entry costs 1
// more round trip (2 after a doubling, plus 1 per hop of a walk); a lost CAS costs a re-read of
// the winner's block and another CAS. A split costs about 15 round trips, whose batches are as
// large as the subtable (one atomic per slot to freeze and to release).
//
// # Runtime
//
// Time, sleeps and randomness come only from the client's farmem.Runtime; the package starts
// no goroutine and takes no Go lock, so it runs unchanged on the simulator. Waiting (for a
// split, for a competing inserter) is polling far memory with backoff, since the state waited
// on is in far memory, not in the client's own region.
//
// # Limits
//
// At most 255 memory nodes and 16 TiB per node for anything the table allocates; blocks of at
// most 16320 bytes; global depth at most MaxDepthLimit; a subtable at Params.MaxDepth that
// fills gives ErrFull. Subtables are never freed (a table only grows), nor merged when keys are
// deleted. A client that dies leaks the blocks it had allocated and not published.
package race
