// Package flexkv checks kvstore/README.md, which holds FlexKV's simulated figures
// (farmem repro flexkv), against its quick-mode golden. It is one of the packages that share out
// the README checks of internal/figures, so that no test package runs every quick mode.
// Regenerate the block with:
//
//	go test -timeout 2h ./internal/figures/check/flexkv -run TestREADMEs -update repro-flexkv
package flexkv

import (
	"testing"

	"github.com/farmem/farmem/internal/figures/figurestest"
)

func TestREADMEs(t *testing.T) {
	figurestest.CheckREADMEs(t, "kvstore/README.md")
}
