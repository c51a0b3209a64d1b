package race

// Test hooks: deliberate defects and a hash override, on one handle.

// SetHashForTest makes the handle hash keys with f (every handle on a table must use the same).
func SetHashForTest(t *Table, f func(key []byte) (h1, h2 uint64)) {
	t.hash = func(key []byte) keyHash {
		h1, h2 := f(key)
		return keyHash{h1: h1, h2: h2}
	}
}

// SetDefectForTest turns on a deliberate bug: "no-tentative", "no-checksum", "no-retire" or
// "no-header-check".
func SetDefectForTest(t *Table, name string) {
	switch name {
	case "no-tentative":
		t.bug.noTentative = true
	case "no-checksum":
		t.bug.noChecksum = true
	case "no-retire":
		t.bug.noRetire = true
	case "no-header-check":
		t.bug.noHeaderCheck = true
	default:
		panic("unknown defect " + name)
	}
}

// CrashSplitForTest makes the handle's next split stop at step n (1..7, see crashPoint) as if
// the client died there: it returns an error and keeps the split lock.
func CrashSplitForTest(t *Table, n int) { t.bug.crashAt = n }

// ErrCrashedForTest is the error a crashed split returns.
var ErrCrashedForTest = errCrashed

// StallSplitForTest makes the handle's next split call f at step n (1..7), as if the client
// were paused there for as long as f blocks.
func StallSplitForTest(t *Table, n int, f func()) { t.bug.stallAt, t.bug.stall = n, f }
