// Package generator is YCSB's request generators, used by package bench's workloads and by the
// simulator's sweeps: each draws item numbers from a *rand.Rand the caller passes in, so a run
// on the simulator (whose clients have seeded sources) is a function of its seed, and each
// draws what YCSB's Java generator of the same name draws (the deliberate differences are
// stated on the type).
//
// The laws, exactly:
//
//   - Zipfian (YCSB's ZipfianGenerator, Gray et al.'s algorithm, theta 0.99 by default): Zipf's
//     law for the two most popular items, Gray's continuous approximation past them (rank 2
//     about 17-19% more often than Zipf's law at theta 0.99; the formula is on the type).
//     Zipfian.Prob returns this law.
//   - ScrambledZipfian (YCSB's ScrambledZipfianGenerator): a Zipfian draw over YCSB's space of
//     10^10+1 items folded onto the key range by FNVHash64; a key's probability sums the
//     folded items' (no closed form).
//   - Permuted: a Zipfian over the n keys' ranks mapped onto the keys one to one by a fixed
//     multiplicative bijection, so each key has exactly one rank's Gray probability. It is not
//     YCSB's scrambled distribution; the CIDER sweep of ds/cider draws from it.
//   - Latest (YCSB's SkewedLatestGenerator): a growing Zipfian counted back from the newest
//     acknowledged insert (AckCounter).
//   - Hotspot (YCSB's HotspotIntegerGenerator) and Uniform: uniform within their sets.
//
// Keys are named as YCSB names them (KeyName): "user" and the key number hashed with FNVHash64
// (unless inserts are ordered). KeyBinary64 is the other format (AppendBinary64Key): the 8-byte
// big-endian key number plus one, never its hash, so keys are nonzero, below 2^63 and in
// numeric order bytewise, as Dolphin's fixed 8-byte keys need.
//
// Costs: building a Zipfian sums zeta over its items (O(n), about a second per 50 million);
// ScrambledZipfian uses YCSB's precomputed zeta; a draw is O(1) (one Float64 and one Pow).
// Constructors of the YCSB generators panic on an empty range or a theta outside (0, 1), as
// programming errors; NewPermuted, built from experiment parameters, returns an error.
package generator
