package hybrid

import (
	"testing"

	"github.com/farmem/farmem/farmem"
)

// FuzzDecodeNode decodes arbitrary bytes as a node: it never panics, and what it accepts
// routes every key to a slot it holds or to none.
func FuzzDecodeNode(f *testing.F) {
	f.Add(encodeNode(8, 1, 7, true, 0x0102030405060700, []uint64{1 << entKindSh, 2<<entPartSh | 1<<entKindSh}))
	f.Add(encodeNode(0, 0, 0, false, 0, nil)[:40])
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeNode(farmem.MakeAddr(1, 64), b)
		if err != nil {
			return
		}
		if len(n.slots) > typeCap[n.typ] {
			t.Fatalf("%d slots for type %d", len(n.slots), n.typ)
		}
		for _, k := range []uint64{1, 0x0102030405060708, MaxKey} {
			if i := n.route(k); i >= len(n.slots) {
				t.Fatalf("route %d of %d slots", i, len(n.slots))
			}
		}
	})
}

// FuzzDecodeLeaf decodes arbitrary bytes as a leaf of 8 slots without panicking, and finds
// only committed keys.
func FuzzDecodeLeaf(f *testing.F) {
	f.Add(encodeLeaf(8, 1, 0x100, 0x200, 1, []uint64{0x105, 0x106}, []uint64{1, 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < leafSize(8) {
			return
		}
		var l leaf
		decodeLeafHead(b, 8, &l)
		decodeLeafTail(b[leafValsOff(8):], 8, &l)
		for _, k := range []uint64{0x105, tombstone, 0x106 | tentativeBit} {
			if i := l.find(k); i >= 0 && (l.keys[i] != k || k&tentativeBit != 0 && k != l.keys[i]) {
				t.Fatalf("find %#x at %d holding %#x", k, i, l.keys[i])
			}
		}
	})
}
