package kvstore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
)

// SwarmObjectAddrs returns the replicas' addresses of key's object in a Swarm store, read from
// the index with one pooled client.
func SwarmObjectAddrs(ctx context.Context, s *Store, key []byte) ([]farmem.Addr, error) {
	c, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer s.release(c, nil)
	x, ok := c.idx.(*swarmIndex)
	if !ok {
		return nil, fmt.Errorf("not a swarm index")
	}
	ref, err := x.t.Search(ctx, x.ikey(key))
	if err != nil {
		return nil, err
	}
	return x.addrs(alloc.SymOffset(binary.LittleEndian.Uint64(ref))), nil
}
