//go:build !(linux && cgo && rdma)

// Package ibv is the device layer of the rdma package's ibverbs provider over rdma-core's
// libibverbs (see the rdma-tagged build). This build has none: it was built without
// -tags rdma, without cgo, or not on Linux, so Open and Devices fail with
// farmem.ErrNotSupported.
package ibv

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma/internal/verbs"
)

// Available reports that this build has no device layer.
const Available = false

var errNotBuilt = fmt.Errorf("ibv: built without the device layer (needs linux, cgo, libibverbs and -tags rdma): %w", farmem.ErrNotSupported)

// Devices fails: this build has no device layer.
func Devices() ([]string, error) { return nil, errNotBuilt }

// Open fails: this build has no device layer.
func Open(spec string) (verbs.Device, error) { return nil, errNotBuilt }
