package qlock

// SetDefectForTest turns on a deliberate bug: "no-wait" (Lock enters the critical section
// without waiting for its predecessor's hand-over).
func SetDefectForTest(l *Locker, name string) {
	switch name {
	case "no-wait":
		l.bug.noWait = true
	default:
		panic("unknown defect " + name)
	}
}
