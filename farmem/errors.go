package farmem

import "errors"

// Sentinel errors. Verbs wrap them with %w and context (the op, the address), so callers test
// with [errors.Is].
var (
	// ErrOutOfRange: the address is outside every registered region, or the access runs past
	// the end of its region.
	ErrOutOfRange = errors.New("farmem: address out of range")
	// ErrMisaligned: an atomic's address is not 8-byte aligned.
	ErrMisaligned = errors.New("farmem: misaligned atomic")
	// ErrNodeDown: the target node crashed, is unreachable, or did not answer within the fabric's
	// down timeout. The op may or may not have taken effect, but not arbitrarily late: an op
	// reported failed takes effect, if at all, before its post time plus the down timeout (plus
	// the clock skew between client and node, on transports whose nodes check a request's expiry
	// against their own clock; see each transport's doc).
	ErrNodeDown = errors.New("farmem: node down")
	// ErrClosed: the client or fabric was closed.
	ErrClosed = errors.New("farmem: closed")
	// ErrInvalid: a malformed argument (nil condition, empty batch, a buffer too large, a role
	// mismatch such as a Call to a memory node).
	ErrInvalid = errors.New("farmem: invalid argument")
	// ErrNotLocal: Wait on a word outside the caller's own compute node region.
	ErrNotLocal = errors.New("farmem: not in the caller's own region")
	// ErrNoHandler: a Call named a method the target compute node has no handler for.
	ErrNoHandler = errors.New("farmem: no handler for method")
	// ErrRemote: a Call handler returned an error; its text follows.
	ErrRemote = errors.New("farmem: remote handler failed")
	// ErrAborted: the op was not executed because another op of its batch was rejected
	// (out of range, misaligned or invalid); nothing of the batch was applied.
	ErrAborted = errors.New("farmem: batch aborted")
	// ErrAtomicOverlap: strict mode saw a plain write overlap a word that atomics use. The write
	// was not applied.
	ErrAtomicOverlap = errors.New("farmem: plain write overlaps an atomic word")
	// ErrNotSupported: the transport cannot do this (a fault it cannot inject, a provider not
	// built in).
	ErrNotSupported = errors.New("farmem: not supported")
)

// ErrNoSpace: a region, slot table or allocator is exhausted.
var ErrNoSpace = errors.New("farmem: no space")
