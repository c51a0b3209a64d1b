//go:build !unix

package rdma

import (
	"net"
	"syscall"
)

// rawWriter cannot write without waiting here.
type rawWriter struct{}

func newRawWriter(net.Conn) *rawWriter { return &rawWriter{} }

// try cannot write without waiting here: ok is false, and the caller writes some other way.
func (*rawWriter) try(b []byte) (n int, ok bool, err error) { return 0, false, nil }

// rawReader is not used where sockRaw returns nil.
type rawReader struct{}

// sockRaw returns nil: the reader role reads through the net.Conn.
func sockRaw(nc net.Conn) syscall.RawConn { return nil }

// rawRead is not used where sockRaw returns nil.
func (l *tlink) rawRead(b []byte) (int, error) { return l.conn.Read(b) }
