//go:build race

package cidertest_test

// raceDetector reports whether this test binary was built with the race detector (see
// norace_test.go).
const raceDetector = true
