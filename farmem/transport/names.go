package transport

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// MethodName renders a method id as owner.number (the owner named by farmem's table of method
// blocks, e.g. "ds/race.3"), for a transport's errors and logs. No allocation beyond the
// string.
func MethodName(method uint16) string {
	return fmt.Sprintf("%v.%d", farmem.MethodOwner(method>>8), uint8(method))
}

// RoleOf returns the role a node id's encoding gives it: compute when farmem.ComputeNodeBit is
// set, else memory. A transport uses it to check what a peer claims to be; above the
// transports, farmem.NodeInfo.Role and NodeID.IsCompute say the same.
func RoleOf(id farmem.NodeID) farmem.Role {
	if id.IsCompute() {
		return farmem.RoleCompute
	}
	return farmem.RoleMemory
}
