//go:build amd64 && !noasm

package race

// fpMask returns the words of b (whole little-endian slot words, at most fpMaskMax bytes)
// whose fingerprint, the word's top byte (its last), is fp: bit k for word k. In SSE2 (every
// amd64 has it), eight words a step: four 16-byte compares against fp in every byte, OR-ed,
// and one MOVMSKPD (the sign bits of the two 8-byte lanes: each word's top byte's) to tell a
// step with a match, whose words' bits are then gathered the same way; some 20 instructions
// for eight words, against some 40 for a Go loop of loads, xors and compares.
//
//go:noescape
func fpMask(b []byte, fp uint8) uint64
