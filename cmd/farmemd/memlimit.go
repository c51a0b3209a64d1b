package main

import (
	"runtime/debug"

	"github.com/farmem/farmem/rdma"
)

const (
	// handshakeBound is what one connection in its handshake holds, as the Bounds section
	// counts it.
	handshakeBound = 8 << 10
	// runtimeSlack is the Go runtime's own memory and everything the node keeps besides its
	// connections' buffers (its tables, goroutine stacks, the metrics endpoint).
	runtimeSlack = 32 << 20
)

// memoryLimit is the Go memory the Bounds section allows a node: every connection's buffers
// (maxConns authenticated, maxUnauth in their handshake), the two node-wide budgets of
// budget bytes each, and runtimeSlack. The region is not Go memory and is not counted.
func memoryLimit(maxConns, maxUnauth int, budget int64) int64 {
	return int64(maxConns)*rdma.ConnBufferBound + int64(maxUnauth)*handshakeBound + 2*budget + runtimeSlack
}

// limitMemory makes limit the Go runtime's soft memory limit, unless a lower one is set
// already, and returns the limit in force. Without it the collector lets the heap grow to
// twice what it found live, so the budgets' large buffers, given back and garbage, would
// raise the node's resident memory to about twice the Bounds section's figure; with it the
// collector runs before the heap passes the limit. It never refuses memory: were the live
// buffers ever above the limit, the collector would run more often (costing CPU), not fail.
func limitMemory(limit int64) int64 {
	if cur := debug.SetMemoryLimit(-1); cur <= limit {
		return cur
	}
	debug.SetMemoryLimit(limit)
	return limit
}
