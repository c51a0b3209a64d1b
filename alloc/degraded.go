package alloc

import (
	"context"
	"errors"

	"github.com/farmem/farmem/farmem"
)

// readHeadersDegraded is readHeaders for New on a fabric where memory nodes may be down: when
// the one batch fails because a node does not answer, it reads each header on its own and
// returns the nodes that did not answer in down (New lays them out from the home header, as
// it does lost ones, and Alloc skips them while they do not answer). The home node's header and
// the handover word must be read: a down home node fails New. Cost: one round trip when every
// node answers; otherwise one per node, one for the word.
func readHeadersDegraded(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, wordAt farmem.Addr) (map[farmem.NodeID]Header, uint64, []farmem.NodeID, error) {
	hdrs, word, err := readHeaders(ctx, m, nodes, wordAt)
	if err == nil || !errors.Is(err, farmem.ErrNodeDown) || errors.Is(err, farmem.ErrNodeLost) || len(nodes) < 2 {
		return hdrs, word, nil, err
	}
	first := err
	hdrs = make(map[farmem.NodeID]Header, len(nodes))
	var down []farmem.NodeID
	for _, n := range nodes {
		h, _, err := readHeaders(ctx, m, []farmem.NodeID{n}, 0)
		switch {
		case err == nil:
			hdrs[n] = h[n]
		case errors.Is(err, farmem.ErrNodeDown) && !errors.Is(err, farmem.ErrNodeLost):
			down = append(down, n)
		default:
			return nil, 0, nil, err
		}
	}
	if len(hdrs) == 0 {
		return nil, 0, nil, first
	}
	if wordAt != 0 {
		if _, word, err = readHeaders(ctx, m, nil, wordAt); err != nil {
			return nil, 0, nil, err
		}
	}
	return hdrs, word, down, nil
}

// firstRead returns the first of nodes whose header hdrs holds.
func firstRead(nodes []farmem.NodeID, hdrs map[farmem.NodeID]Header) farmem.NodeID {
	for _, n := range nodes {
		if _, ok := hdrs[n]; ok {
			return n
		}
	}
	return nodes[0]
}
