package maxreg

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// FormatReplicatedQuorum is FormatReplicated for a register created while up to f of its
// 2f+1 replicas may be down: each replica is formatted in turn with one header, a replica
// that fails with farmem.ErrNodeDown is skipped, and it succeeds once a majority is
// formatted. It returns which replicas were (ok[i]). Reads and writes count only the replicas
// that answer, and a crashed replica never answers again before its node is adopted; a
// replica that was only unreachable (paused, cut off) and comes back holds whatever its block
// held before, which the register does not tell from a format: a caller that must survive
// that formats only on nodes it knows are up. FormatRoundTrips per replica formatted, one
// replica after the other, plus a down timeout per replica down and not yet suspected.
func FormatReplicatedQuorum(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, p Params) ([]bool, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkReplicas(addrs); err != nil {
		return nil, err
	}
	rt := m.Runtime()
	h := header{p: p, base: rt.Now(), nonce: rt.Rand().Uint64()}
	ok := make([]bool, len(addrs))
	n := 0
	var last error
	for i, a := range addrs {
		err := format(ctx, m, a, h)
		switch {
		case err == nil:
			ok[i] = true
			n++
		case errors.Is(err, farmem.ErrNodeDown):
			last = err
		default:
			return ok, err
		}
	}
	if n < len(addrs)/2+1 {
		return ok, fmt.Errorf("maxreg: format: %d of %d replicas formatted: %w: %w", n, len(addrs), ErrNoQuorum, last)
	}
	return ok, nil
}
