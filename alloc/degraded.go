package alloc

import (
	"context"
	"errors"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// readHeadersDegraded is readHeaders for New on a fabric where memory nodes may be down: when
// the one batch fails because a node does not answer, it reads each header on its own and
// returns the nodes that did not answer in down (New lays them out from the home header, as
// it does lost ones, and Alloc skips them while they do not answer). The home node's header and
// the handover word must be read: a down home node fails New. Cost: one round trip when every
// node answers; otherwise one per node, one for the word.
//
// A node adopted after a restart and not formatted again yet (ErrNotFormatted,
// ErrHalfFormatted) is returned in unformatted, read one by one like a down node; New accepts
// it only with replicated metadata (Reformat restores it while the others serve).
func readHeadersDegraded(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, wordAt farmem.Addr) (hdrs map[farmem.NodeID]Header, word uint64, down, unformatted []farmem.NodeID, err error) {
	hdrs, word, err = readHeaders(ctx, m, nodes, wordAt)
	blank := errors.Is(err, ErrNotFormatted) || errors.Is(err, ErrHalfFormatted)
	if err == nil || !blank && (!errors.Is(err, farmem.ErrNodeDown) || errors.Is(err, farmem.ErrNodeLost)) || len(nodes) < 2 {
		return hdrs, word, nil, nil, err
	}
	first := err
	word = 0
	hdrs = make(map[farmem.NodeID]Header, len(nodes))
	for _, n := range nodes {
		h, _, err := readHeaders(ctx, m, []farmem.NodeID{n}, 0)
		switch {
		case err == nil:
			hdrs[n] = h[n]
		case errors.Is(err, farmem.ErrNodeDown) && !errors.Is(err, farmem.ErrNodeLost):
			down = append(down, n)
		case errors.Is(err, ErrNotFormatted) || errors.Is(err, ErrHalfFormatted):
			unformatted = append(unformatted, n)
		default:
			return nil, 0, nil, nil, err
		}
	}
	if len(hdrs) == 0 {
		return nil, 0, nil, nil, first
	}
	// The word is on the lowest node read: if that node is down, New needs it only when the
	// metadata is not replicated, and then finds the home node down.
	if wordAt != 0 && !slices.Contains(down, wordAt.Node()) && !slices.Contains(unformatted, wordAt.Node()) {
		if _, word, err = readHeaders(ctx, m, nil, wordAt); err != nil {
			return nil, 0, nil, nil, err
		}
	}
	return hdrs, word, down, unformatted, nil
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
