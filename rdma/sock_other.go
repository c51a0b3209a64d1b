//go:build !unix

package rdma

import "net"

// tryWrite cannot write without waiting here: ok is false, and the caller writes some other
// way.
func tryWrite(nc net.Conn, b []byte) (n int, ok bool, err error) { return 0, false, nil }
