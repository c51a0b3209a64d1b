package rdma

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// A provider is a data path: how a client's verbs reach a remote node's region. The tcp
// provider (this package, pure Go) sends Batch frames over one authenticated TCP connection per
// client and node. Another provider (ibverbs) registers itself in providers from its own
// build-tagged file; it gets the authenticated control connection to each node (peer.control)
// to exchange its setup (queue pair numbers, memory region keys) through control ops numbered
// from wire.CtlProvider, which its server half registers in srv.ctlOps.
//
// Everything around the data path — the handshake and secret, node info and health, compute
// membership, Calls, the Wait of a compute node's own region, fault injection — is the same
// for every provider.
type provider interface {
	// name is the provider's name in Options.Provider and farmemd --provider.
	name() string
	// connect returns a queue pair from client c to remote node p. It returns at once; any
	// network setup runs in the background, and work posted meanwhile waits for it.
	connect(c *client, p *peer) qp
}

// serverProvider is a provider's memory-node half, attached to a Server whose
// ServerOptions.Provider names it (tcp needs none: the server itself speaks it).
type serverProvider interface {
	// attach prepares the provider over the server's region and registers its control ops
	// in s.ctlOps.
	attach(s *srv) error
	// detach releases what attach set up; the server calls it on Close.
	detach() error
}

// qp is one client's ordered channel to one remote node, like an RC queue pair: work posted on
// it applies at the node in posting order.
type qp interface {
	// post sends the ops of b at idx (all of b when idx is nil), in order, to the node and
	// reports each signaled op's outcome to s exactly once. It does not block on the network,
	// only on the provider's limit of outstanding work, or until ctx ends. The ops all address
	// the qp's node and have passed transport.CheckOp.
	post(ctx context.Context, b *farmem.Batch, idx []int, s sink)
	// parker returns a Parker for a batch to be posted with postWaited, which posts like post
	// for a waiter that will park on that Parker (a provider may have the waiter collect the
	// answers itself). A nil Parker means: use post and a plain Parker. (The tcp provider's
	// batches take client.startPost's state instead.)
	parker() transport.Parker
	postWaited(ctx context.Context, b *farmem.Batch, idx []int, s sink)
	// do posts a one-op batch, reporting to s, and waits until done is signaled (s signals it
	// on completion) or ctx ends, returning ctx's error then (the op stays in flight). It is
	// the lone verb's path, where a provider can save a hand-off between goroutines.
	do(ctx context.Context, b *farmem.Batch, s sink, done chan struct{}) error
	// alive reports whether the qp still carries work; a dead one is replaced.
	alive() bool
	// close fails what is outstanding with err and releases the qp. It is idempotent.
	close(err error)
}

// sink receives the outcomes of a posted batch's ops.
type sink interface {
	// complete counts op i's outcome in the client's Counters and completes it.
	complete(i int, val uint64, err error)
	// counted completes op i whose outcome the caller has counted already (the tcp reader
	// counts a run of answers' bytes ahead: transport.Counters.ReceiveAhead).
	counted(i int, val uint64, err error)
}

// providers are the data paths built into this binary, by name.
var providers = map[string]provider{"tcp": tcpProvider{}}

// serverProviders make the memory-node halves of providers other than tcp, by name.
var serverProviders = map[string]func() serverProvider{}

// unavailable says why a known provider is not built into this binary, by name.
var unavailable = map[string]string{}

// providerFaults is implemented by a serverProvider whose data path bypasses the server's CPU
// (an RDMA NIC applies verbs by itself): the server's fault injection calls it, so a crash,
// hang or partition reaches that data path too.
type providerFaults interface {
	// crash stops the data path for good.
	crash()
	// silence cuts client (every client when 0) off the data path: its work goes unanswered.
	// Ending a silence (on false) lets the client set up a new path.
	silence(client farmem.ClientID, on bool)
	// crashAfter arms a crash after n ops, or fails with farmem.ErrNotSupported.
	crashAfter(n int) error
}

func lookupProvider(name string) (provider, error) {
	if name == "" {
		name = "tcp"
	}
	if p, ok := providers[name]; ok {
		return p, nil
	}
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	if why := unavailable[name]; why != "" {
		return nil, fmt.Errorf("rdma: provider %q is not built in (have %s): %s: %w", name, strings.Join(names, ", "), why, farmem.ErrNotSupported)
	}
	return nil, fmt.Errorf("rdma: provider %q is not built in (have %s): %w", name, strings.Join(names, ", "), farmem.ErrNotSupported)
}
