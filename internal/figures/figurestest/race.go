//go:build race

package figurestest

// raceDetector reports whether this binary was built with the race detector (see norace.go).
const raceDetector = true
