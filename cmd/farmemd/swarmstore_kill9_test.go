package main

import (
	"testing"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/kvstore"
)

// TestSwarmStoreKill9: three farmemd processes and a SWARM-KV store (kvstore.Swarm: a
// replicated index of keys to objects on all three). Writers run throughout; node 2 is paused
// with SIGSTOP past the down timeout and continued (it misses updates meanwhile), then node 3
// is SIGKILLed, so every later read needs node 2's answer beside node 1's: no operation fails
// and every acknowledged write reads back. Every key exists before the first fault: an object
// created while a replica is unreachable is formatted on the others only (Open heals it
// later), and the index words written meanwhile reach the replica only through the replicated
// memory's catch-up copies. TestSwarmStoreRestartKill9 restarts a killed node and adopts it.
func TestSwarmStoreKill9(t *testing.T) {
	parallel(t, 3800*time.Millisecond, true) // its own farmemd processes, writers busy throughout
	opts := kvstore.Options{
		Alloc: alloc.Options{Lease: 30 * time.Second, Refresh: time.Second},
		Index: kvstore.Swarm{Params: maxreg.Params{ValueSize: 64, Slots: 4, Writers: 16}, Index: race.Params{Groups: 8}},
	}
	replicatedKill9(t, kill9Scenario{opts: opts, nodes: 3, steps: []faultStep{{pause, 2}, {kill, 3}}, pauseFor: 1500 * time.Millisecond,
		keysFirst: true})
}

// TestSwarmStoreRestartKill9: three farmemd processes and a SWARM-KV store; writers run
// throughout. Node 1 (the home node, holding the store's root, the first replica of the index
// and of every object) is SIGKILLed, started again empty at its address and adopted (the
// store's metadata, the index and every object's replica copied onto it from nodes 2 and 3),
// then node 2 is paused with SIGSTOP past the down timeout (5 s with -farmemd.long-faults)
// and continued, and then node 3 is SIGKILLed: the next crash, which the adopted node must
// carry, every read now needing node 1's answer beside node 2's. No operation fails and every
// acknowledged write reads back; the time until the median latency is back after each fault
// is logged.
func TestSwarmStoreRestartKill9(t *testing.T) {
	parallel(t, 7*time.Second, true) // its own farmemd processes, writers busy throughout
	opts := kvstore.Options{
		Alloc: alloc.Options{Lease: 30 * time.Second, Refresh: time.Second},
		Index: kvstore.Swarm{Params: maxreg.Params{ValueSize: 64, Slots: 4, Writers: 16}, Index: race.Params{Groups: 8}},
	}
	pauseFor := 1500 * time.Millisecond // past the 1 s down timeout
	if *longFaults {
		pauseFor = 5 * time.Second
	}
	replicatedKill9(t, kill9Scenario{opts: opts, nodes: 3, steps: []faultStep{{kill, 1}, {restart, 1}, {pause, 2}, {kill, 3}},
		pauseFor: pauseFor})
}
