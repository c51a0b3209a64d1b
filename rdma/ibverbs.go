//go:build linux && cgo && rdma

package rdma

import (
	"github.com/farmem/farmem/rdma/internal/ibv"
	"github.com/farmem/farmem/rdma/internal/verbs"
)

// The ibverbs provider: the verbs data path over rdma-core's libibverbs (package
// internal/ibv), with the queue-pair defaults of package verbs.
func init() {
	newVerbsProvider("ibverbs", ibv.Open, verbs.Config{}).register()
}
