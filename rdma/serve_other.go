//go:build !unix

package rdma

// serveRaw reports false: without raw descriptor reads the connection is served with buffered
// reads (see serve_unix.go).
func (c *sconn) serveRaw() bool { return false }
