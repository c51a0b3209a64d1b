package race

// fpMaskMax is the most bytes fpMask takes: 64 slot words, one bit each in its answer.
const fpMaskMax = 8 * 64

// fpMaskGeneric is fpMask in Go, for other architectures (and the assembly's check): a byte
// compare a word.
func fpMaskGeneric(b []byte, fp uint8) uint64 {
	var m uint64
	for j := 7; j < len(b); j += 8 {
		if b[j] == fp {
			m |= 1 << uint(j>>3)
		}
	}
	return m
}
