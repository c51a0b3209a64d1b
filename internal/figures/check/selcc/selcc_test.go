// Package selcc checks ds/selcc/README.md, which holds SELCC's simulated figures
// (farmem repro selcc), against its quick-mode golden. It is one of the packages that share out
// the README checks of internal/figures, so that no test package runs every quick mode.
// Regenerate the block with:
//
//	go test -timeout 2h ./internal/figures/check/selcc -run TestREADMEs -update repro-selcc
package selcc

import (
	"testing"

	"github.com/farmem/farmem/internal/figures/figurestest"
)

func TestREADMEs(t *testing.T) {
	figurestest.CheckREADMEs(t, "ds/selcc/README.md")
}
