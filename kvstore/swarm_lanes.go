package kvstore

import (
	"sync"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
)

// swarmLanes holds, per fabric, the lane state every handle of this process shares on the
// objects of SWARM-KV stores with per-node lanes (maxreg.Lanes): two stores of one process on
// one fabric write the same objects from the same compute nodes, so they must share it too.
// An entry lives while a handle uses it.
var swarmLanes = struct {
	sync.Mutex
	m map[farmem.Fabric]*swarmLanesRef
}{m: map[farmem.Fabric]*swarmLanesRef{}}

type swarmLanesRef struct {
	l    *maxreg.Lanes
	refs int
}

// swarmLanesOf returns f's lanes and the release of the caller's reference (f is not nil:
// Swarm's Open refuses per-node lanes without a fabric).
func swarmLanesOf(f farmem.Fabric) (*maxreg.Lanes, func()) {
	swarmLanes.Lock()
	defer swarmLanes.Unlock()
	e := swarmLanes.m[f]
	if e == nil {
		e = &swarmLanesRef{l: maxreg.NewLanes()}
		swarmLanes.m[f] = e
	}
	e.refs++
	var once sync.Once
	return e.l, func() {
		once.Do(func() {
			swarmLanes.Lock()
			defer swarmLanes.Unlock()
			if e.refs--; e.refs == 0 && swarmLanes.m[f] == e {
				delete(swarmLanes.m, f)
			}
		})
	}
}
