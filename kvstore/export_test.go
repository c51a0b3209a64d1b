package kvstore

// SetPutDefectForTest makes every Put a Delete followed by an Insert (not atomic: a reader in
// between sees the key missing), to show that the linearizability test catches a broken Put.
func SetPutDefectForTest(on bool) { putDefect.Store(on) }
