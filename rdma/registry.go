package rdma

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// registry keeps compute membership on the designated memory node: which compute ids are
// claimed, by which process (a random token), where each listens, and until when its lease
// runs. It is control plane only: no verb depends on it.
type registry struct {
	mu      sync.Mutex
	members map[farmem.ComputeID]*memberEntry
	now     func() time.Time
}

type memberEntry struct {
	member
	token   uint64
	expires time.Time
}

// member is a compute node as the registry lists it.
type member struct {
	Compute farmem.ComputeID `json:"compute"`
	Addr    string           `json:"addr"`
	// Key is the compute node's region key, so peers can post to it before connecting.
	Key uint32 `json:"key"`
}

// joinReq claims a compute id (0: the lowest free one not in Exclude) for a process, or renews
// or gives back its lease.
type joinReq struct {
	Compute farmem.ComputeID   `json:"compute"`
	Addr    string             `json:"addr"`
	Key     uint32             `json:"key"`
	Token   uint64             `json:"token"`
	Lease   time.Duration      `json:"lease_ns"`
	Exclude []farmem.ComputeID `json:"exclude,omitempty"`
}

// joinReply is the registry's answer: the compute id held and the members.
type joinReply struct {
	Compute farmem.ComputeID `json:"compute"`
	Members []member         `json:"members"`
}

func newRegistry() *registry {
	return &registry{members: make(map[farmem.ComputeID]*memberEntry), now: time.Now}
}

// maxLease bounds a lease a client may ask for.
const maxLease = time.Hour

func (r *registry) handle(op wire.CtlOp, body []byte) (any, error) {
	var req joinReq
	if op != wire.CtlList {
		if err := wire.DecodeJSON(body, &req); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for id, m := range r.members {
		if now.After(m.expires) {
			delete(r.members, id)
		}
	}
	switch op {
	case wire.CtlList:
		return joinReply{Members: r.listLocked()}, nil
	case wire.CtlLeave:
		if m := r.members[req.Compute]; m != nil && m.token == req.Token {
			delete(r.members, req.Compute)
		}
		return joinReply{Members: r.listLocked()}, nil
	}
	if req.Lease <= 0 || req.Lease > maxLease || req.Token == 0 {
		return nil, fmt.Errorf("rdma: join: lease %v, token %d: %w", req.Lease, req.Token, farmem.ErrInvalid)
	}
	if req.Compute > farmem.MaxComputeID {
		return nil, fmt.Errorf("rdma: join: compute id %d: %w", req.Compute, farmem.ErrInvalid)
	}
	if _, _, err := net.SplitHostPort(req.Addr); err != nil {
		return nil, fmt.Errorf("rdma: join: address %q: %w", req.Addr, farmem.ErrInvalid)
	}
	id := req.Compute
	if op == wire.CtlRenew {
		m := r.members[id]
		if m == nil || m.token != req.Token {
			return nil, fmt.Errorf("rdma: renew: compute %d holds no lease of this process: %w", id, farmem.ErrClosed)
		}
	} else if id == 0 {
		for id = 1; id <= farmem.MaxComputeID; id++ {
			if r.members[id] == nil && !slices.Contains(req.Exclude, id) {
				break
			}
		}
		if id > farmem.MaxComputeID {
			return nil, fmt.Errorf("rdma: join: every compute id is taken: %w", farmem.ErrNoSpace)
		}
	} else if m := r.members[id]; m != nil && m.token != req.Token {
		return nil, fmt.Errorf("rdma: join: compute id %d is held by %s: %w", id, m.Addr, farmem.ErrNoSpace)
	}
	r.members[id] = &memberEntry{member: member{Compute: id, Addr: req.Addr, Key: req.Key}, token: req.Token, expires: now.Add(req.Lease)}
	return joinReply{Compute: id, Members: r.listLocked()}, nil
}

func (r *registry) listLocked() []member {
	ms := make([]member, 0, len(r.members))
	for _, m := range r.members {
		ms = append(ms, m.member)
	}
	slices.SortFunc(ms, func(a, b member) int { return int(a.Compute) - int(b.Compute) })
	return ms
}

func (r *registry) list() []member {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listLocked()
}
