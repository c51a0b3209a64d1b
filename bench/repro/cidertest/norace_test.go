//go:build !race

package cidertest_test

// raceDetector reports whether this test binary was built with the race detector: under it,
// TestCiderShape skips, and the README's test command runs it in its second part, built
// without the detector. Its three simulated sweeps (up to 192 clients) took 35 s of this
// package's 36 s in a race-enabled whole-tree run on 2 cores (the slowest package there, past
// the 30 s each package is allowed; about 16 s of CPU on their own), against 2.6-3.7 s without
// the detector, and give the detector nothing that TestCiderDeterministic's run of the same
// harness, its seeds at once, does not.
const raceDetector = false
