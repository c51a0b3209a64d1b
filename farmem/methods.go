package farmem

import "fmt"

// MethodOwner names who owns a block of Call and message method ids: the high byte of a
// method id. Every structure that registers handlers takes its ids from its own block with
// [MethodOwner.Method], so two structures cannot pick the same id by accident; the table below
// is the one place blocks are handed out, and a new structure adds its owner here.
//
// Block 0 ([OwnerApp]) is left to applications and tests that register handlers of their own.
// Fabric.Handle refuses a second registration of a method on a node, so an id used twice on
// one node (two owners that share a block by mistake, or one structure opened twice on the
// same node) fails at registration instead of one silently taking the other's messages.
type MethodOwner uint8

// The owners of method blocks. The values are part of the wire format of Calls and messages
// between processes of one cluster: never renumber one, only add.
const (
	// OwnerApp is the block of applications and tests (method ids 0x0000 to 0x00ff).
	OwnerApp MethodOwner = 0x00
	// OwnerKVStore is package kvstore's block, including what its index kinds register per
	// compute node (kvstore hands a kind its own owner's block when the kind has one).
	OwnerKVStore MethodOwner = 0x01
	// OwnerRace is ds/race's block.
	OwnerRace MethodOwner = 0x02
	// OwnerCider is ds/cider's block.
	OwnerCider MethodOwner = 0x03
	// OwnerHybrid is reserved for ds/hybrid (Dolphin).
	OwnerHybrid MethodOwner = 0x04
	// OwnerSELCC is reserved for ds/selcc (invalidations and data forwarding).
	OwnerSELCC MethodOwner = 0x05
	// OwnerSwarm is reserved for ds/swarm.
	OwnerSwarm MethodOwner = 0x06
	// OwnerFlexKV is reserved for FlexKV's index proxying and directory in kvstore.
	OwnerFlexKV MethodOwner = 0x07
	// OwnerNodeState is package farmem/nodestate's block (its own control methods, if any).
	OwnerNodeState MethodOwner = 0x08
)

var ownerNames = map[MethodOwner]string{
	OwnerApp: "app", OwnerKVStore: "kvstore", OwnerRace: "ds/race", OwnerCider: "ds/cider",
	OwnerHybrid: "ds/hybrid", OwnerSELCC: "ds/selcc", OwnerSwarm: "ds/swarm", OwnerFlexKV: "flexkv",
	OwnerNodeState: "nodestate",
}

// String names the owner, or gives its number if the table has no name for it.
func (o MethodOwner) String() string {
	if n, ok := ownerNames[o]; ok {
		return n
	}
	return fmt.Sprintf("owner(%#02x)", uint8(o))
}

// Method returns method id n of o's block: o in the high byte, n in the low.
func (o MethodOwner) Method(n uint8) uint16 { return uint16(o)<<8 | uint16(n) }
