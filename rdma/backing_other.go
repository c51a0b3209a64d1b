//go:build !unix

package rdma

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// mapBacking is unavailable without unix mmap.
func mapBacking(spec string, size uint64) (*region, error) {
	return nil, fmt.Errorf("rdma: backing %q: mapped memory needs a unix system: %w", spec, farmem.ErrNotSupported)
}
