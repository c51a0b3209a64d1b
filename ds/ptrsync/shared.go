package ptrsync

// SharedLock is implemented by a Target whose lock entry is not the pointer's own but one of a
// table that pointers share by hashing (ds/hybrid's large-value pointers: a leaf keeps no entry
// per value word, so the tree keeps a table hashed by the key, as the CIDER paper does for
// SMART's leaf pointers). Several pointers, of different keys, may then queue on one entry.
//
// Such a target promises two things, for as long as the attempt lasts: every nonzero word its
// pointer holds names a block of the key (so Same holds for every nonzero word read there), and
// a CAS of its pointer from a word read at another pointer fails (blocks are published at one
// pointer only, and the epoch pin keeps them from being reused meanwhile). A lock-based
// synchronizer in turn passes a word read at its pointer to another client only tagged with the
// pointer (HintTag), uses a hint only if its tag is its own pointer's, and takes another
// client's outcome as its own only if that client changed the same pointer (the address, not a
// tag): two pointers that share an entry by hashing are never combined. A tag collision (two
// pointers of one entry with equal tags) costs a failed CAS, never a wrong outcome.
type SharedLock interface {
	Target
	// SharedLock marks the target; it is never called.
	SharedLock()
}

// HintTagBits is the width of HintTag's tags.
const HintTagBits = 18

// HintTag returns the tag a synchronizer attaches to a word read at t's pointer when it passes
// it on: 0 for a target with a lock entry of its own (every client of the entry changes the
// same pointer), else a nonzero HintTagBits-bit hash of the pointer's address.
func HintTag(t Target) uint32 {
	if _, ok := t.(SharedLock); !ok {
		return 0
	}
	h := uint64(t.Pointer()) * 0x9e3779b97f4a7c15
	h ^= h >> 29
	return uint32(h%(1<<HintTagBits-1)) + 1
}

// IsShared reports whether t's lock entry may be shared by other pointers (SharedLock).
func IsShared(t Target) bool {
	_, ok := t.(SharedLock)
	return ok
}
