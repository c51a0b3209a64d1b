//go:build !unix

package rdma

// spinSupported: readers never spin before they park here (spin.go): they have no raw
// non-blocking reads (serve_other.go, sock_other.go).
const spinSupported = false
