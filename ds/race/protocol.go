package race

// Protocol notes: how the table's operations stay linearizable, kept beside the code that
// implements them. The package documentation states the outcome; these notes give the
// reasoning a change to ops.go, split.go or purge.go must preserve.

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

// ABA, versions and lock entries
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

// Resizing
//
// What follows is the whole split of layout version 2 and 3 tables. A version 4 table
// (Create's default) splits region by region: splitstep.go's comment gives its steps,
// move.go the owner rule readers and writers decide by, and SPLIT-DESIGN.md the argument that
// it is linearizable (ownership is monotone, so a torn read of header and move word decides
// correctly for the time its slots were read; writers work in one half only, so the insert
// argument above holds unchanged with "the subtable owns the key" for "the header covers it";
// a mixed Search's two reads are each valid for the group it takes from them).
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
