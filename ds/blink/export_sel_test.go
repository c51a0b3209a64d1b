package blink

import (
	"context"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// FarHeight returns the number of levels of the tree rooted at root as far memory holds it
// (one plain READ of the root's body).
func FarHeight(ctx context.Context, m farmem.Memory, root selcc.GCL, line int) (int, error) {
	buf := make([]byte, line)
	if err := m.Read(ctx, root.Body(), buf); err != nil {
		return 0, err
	}
	n, err := decode(buf)
	if err != nil {
		return 0, err
	}
	return int(n.level) + 1, nil
}
