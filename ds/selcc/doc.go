// Package selcc is SELCC (shared-exclusive latch cache coherence, Wang, Wang and Aref): a
// coherent compute-side cache of far memory whose directory lives in each cache line's
// one-sided latch word, so no memory node CPU is ever involved.
package selcc
