package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

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
	CodeOutOfRange: farmem.ErrOutOfRange, CodeMisaligned: farmem.ErrMisaligned, CodeNodeDown: farmem.ErrNodeDown,
	CodeClosed: farmem.ErrClosed, CodeInvalid: farmem.ErrInvalid, CodeNotLocal: farmem.ErrNotLocal,
	CodeNoHandler: farmem.ErrNoHandler, CodeRemote: farmem.ErrRemote, CodeAborted: farmem.ErrAborted,
	CodeAtomicOverlap: farmem.ErrAtomicOverlap, CodeNotSupported: farmem.ErrNotSupported, CodeNoSpace: farmem.ErrNoSpace,
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
// and text msg: it wraps farmem.ErrRemote and, when c names another sentinel, that sentinel too.
func RemoteError(c Code, msg string) error {
	if s := c.Err(); s != nil && s != farmem.ErrRemote && s != errOther {
		return fmt.Errorf("%w: %w: %s", farmem.ErrRemote, s, msg)
	}
	return fmt.Errorf("%w: %s", farmem.ErrRemote, msg)
}
