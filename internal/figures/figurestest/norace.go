//go:build !race

package figurestest

// raceDetector reports whether this binary was built with the race detector: under it,
// [CheckREADMEs] checks the simulated blocks' digests but does not re-run their quick modes.
// The quick modes are programs built without the race detector, so running them from a
// race-enabled test binary checks nothing more than running them from a plain one; the
// race-enabled whole-tree run leaves them to go test ./internal/figures/..., which CI runs.
const raceDetector = false
