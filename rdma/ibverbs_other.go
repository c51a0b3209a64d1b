//go:build !(linux && cgo && rdma)

package rdma

// Without the rdma build tag (or cgo, or Linux) there is no ibverbs provider: asking for it
// fails with farmem.ErrNotSupported and this reason.
func init() {
	unavailable["ibverbs"] = "this binary was built without -tags rdma (the ibverbs provider needs Linux, cgo and rdma-core's libibverbs)"
}
