package zipf

import "math/bits"

func mul64(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }

// div128 divides hi:lo by n; hi < n since both factors were below n.
func div128(hi, lo, n uint64) (q, r uint64) { return bits.Div64(hi, lo, n) }
