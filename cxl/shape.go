package cxl

import "github.com/farmem/farmem/farmem/transport"

// Shape is the cluster's shape: memory nodes and their size, compute nodes, client slots,
// Call handlers, and the sizes of client slices and of each compute node's shared area. Zero
// fields take the defaults of [transport.Shape.EnsureDefaults]. It is the kit's type, named here
// so that a program using this transport need not import the kit.
type Shape = transport.Shape
