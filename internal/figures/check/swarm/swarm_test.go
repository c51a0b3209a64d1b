// Package swarm checks ds/swarm/README.md, which holds SWARM-KV's simulated figures
// (farmem repro swarm), against its quick-mode golden. It is one of the packages that share out
// the README checks of internal/figures, so that no test package runs every quick mode.
// Regenerate the block with:
//
//	go test -timeout 2h ./internal/figures/check/swarm -run TestREADMEs -update repro-swarm
package swarm

import (
	"testing"

	"github.com/farmem/farmem/internal/figures/figurestest"
)

func TestREADMEs(t *testing.T) {
	figurestest.CheckREADMEs(t, "ds/swarm/README.md")
}
