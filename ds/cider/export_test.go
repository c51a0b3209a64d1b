package cider

// SetHookForTest makes s call f at a point of the pessimistic path: "held" (the client holds
// the lock, before it looks for a successor), "exec-sent" (a coordinator handed its batch to
// the executor), "executed" (an executor made its CAS, before it answers the coordinator).
func SetHookForTest(s *CIDER, point string, f func()) {
	switch point {
	case "held":
		s.held = f
	case "exec-sent":
		s.execSent = f
	case "executed":
		s.executed = f
	default:
		panic("unknown hook " + point)
	}
}

// SetDefectForTest turns on a deliberate bug: "no-same-check" (batch members take the batch's
// outcome as theirs without checking it concerned their key).
func SetDefectForTest(s *CIDER, name string) {
	switch name {
	case "no-same-check":
		s.noSameCheck = true
	default:
		panic("unknown defect " + name)
	}
}
