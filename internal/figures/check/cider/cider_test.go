// Package cider checks ds/cider/README.md, which holds CIDER's simulated figures
// (farmem repro cider), against its quick-mode golden. It is one of the packages that share out
// the README checks of internal/figures, so that no test package runs every quick mode.
// Regenerate the block with:
//
//	go test -timeout 2h ./internal/figures/check/cider -run TestREADMEs -update repro-cider
package cider

import (
	"testing"

	"github.com/farmem/farmem/internal/figures/figurestest"
)

func TestREADMEs(t *testing.T) {
	figurestest.CheckREADMEs(t, "ds/cider/README.md")
}
