//go:build !amd64 || noasm

package race

// fpMask returns the words of b (whole little-endian slot words, at most fpMaskMax bytes)
// whose fingerprint, the word's top byte (its last), is fp: bit k for word k.
func fpMask(b []byte, fp uint8) uint64 { return fpMaskGeneric(b, fp) }
