// Package dolphin checks ds/hybrid/README.md, which holds Dolphin's simulated figures
// (farmem repro dolphin), against its quick-mode golden. It is one of the packages that share out
// the README checks of internal/figures, so that no test package runs every quick mode.
// Regenerate the block with:
//
//	go test -timeout 2h ./internal/figures/check/dolphin -run TestREADMEs -update repro-dolphin
package dolphin

import (
	"testing"

	"github.com/farmem/farmem/internal/figures/figurestest"
)

func TestREADMEs(t *testing.T) {
	figurestest.CheckREADMEs(t, "ds/hybrid/README.md")
}
