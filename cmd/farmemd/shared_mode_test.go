package main

import "github.com/farmem/farmem/rdma"

// benchMode is a way of connecting TestClientsBench's clients to the node.
type benchMode struct {
	name string
	opts rdma.Options
}

// benchModes are the modes TestClientsBench compares: a connection per client (the default),
// and one shared by the fabric's clients.
func benchModes() []benchMode {
	return []benchMode{{"per-client", rdma.Options{}}, {"shared", rdma.Options{SharedConns: true}}}
}
