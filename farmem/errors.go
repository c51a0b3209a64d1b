package farmem

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors. Verbs wrap them with %w and context (the op, the address), so callers test
// with [errors.Is].
var (
	// ErrOutOfRange: the address is outside every registered region, or the access runs past
	// the end of its region.
	ErrOutOfRange = errors.New("farmem: address out of range")
	// ErrMisaligned: an atomic's address is not 8-byte aligned.
	ErrMisaligned = errors.New("farmem: misaligned atomic")
	// ErrNodeDown: the target node crashed, is unreachable, or did not answer within the fabric's
	// down timeout. The op may or may not have taken effect.
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

// Code is a sentinel error's number, for carrying errors across a wire or a shared mapping.
type Code uint8

// The codes of the sentinels; CodeOther is an error that wraps none of them.
const (
	CodeOK Code = iota
	CodeOutOfRange
	CodeMisaligned
	CodeNodeDown
	CodeClosed
	CodeInvalid
	CodeNotLocal
	CodeNoHandler
	CodeRemote
	CodeAborted
	CodeAtomicOverlap
	CodeNotSupported
	CodeNoSpace
	CodeCanceled
	CodeDeadline
	CodeOther
)

var codeErrs = [...]error{
	CodeOutOfRange: ErrOutOfRange, CodeMisaligned: ErrMisaligned, CodeNodeDown: ErrNodeDown,
	CodeClosed: ErrClosed, CodeInvalid: ErrInvalid, CodeNotLocal: ErrNotLocal,
	CodeNoHandler: ErrNoHandler, CodeRemote: ErrRemote, CodeAborted: ErrAborted,
	CodeAtomicOverlap: ErrAtomicOverlap, CodeNotSupported: ErrNotSupported, CodeNoSpace: ErrNoSpace,
	CodeCanceled: context.Canceled, CodeDeadline: context.DeadlineExceeded,
}

// CodeOf returns the code of the first sentinel err wraps, CodeOK for nil, CodeOther otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	for c := CodeOutOfRange; c < CodeOther; c++ {
		if errors.Is(err, codeErrs[c]) {
			return c
		}
	}
	return CodeOther
}

// Err returns the sentinel for c: nil for CodeOK, and for CodeOther or an unknown code an
// error that wraps none of the sentinels.
func (c Code) Err() error {
	if c == CodeOK {
		return nil
	}
	if int(c) < len(codeErrs) && codeErrs[c] != nil {
		return codeErrs[c]
	}
	return errOther
}

var errOther = errors.New("farmem: error")

// RemoteError is the error a caller receives when a Call handler fails with an error of code c
// and text msg: it wraps ErrRemote and, when c names another sentinel, that sentinel too.
func RemoteError(c Code, msg string) error {
	if s := c.Err(); s != nil && s != ErrRemote && s != errOther {
		return fmt.Errorf("%w: %w: %s", ErrRemote, s, msg)
	}
	return fmt.Errorf("%w: %s", ErrRemote, msg)
}
