//go:build !linux

package race_test

import "time"

// threadCPU returns -1: no thread CPU clock is read on this platform (the load-tail tool then
// attributes no insert to descheduling).
func threadCPU() time.Duration { return -1 }
