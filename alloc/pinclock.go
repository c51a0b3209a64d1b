package alloc

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// PinAt is Pin for a caller that has just read the runtime's clock: now is that reading, and
// the outermost Pin uses it instead of reading the clock again (a section usually needs the
// time of its start for its own budget too). A now earlier than the real time only makes Pin
// refresh the announcement later; see PinCoarse for why that never makes a section unsafe.
func (a *Allocator) PinAt(ctx context.Context, now farmem.Time) error {
	if outer, err := a.nestPin(); !outer {
		return err
	}
	return a.pinAt(ctx, now)
}

// PinCoarse is Pin without a clock read: the outermost PinCoarse decides whether the
// announcement needs refreshing by the latest clock reading of this allocator's Pin,
// Unpin or announcement, instead of the runtime's clock; it reads the clock only to write an
// announcement (a round trip then follows anyway). With Unpin's own reading, a section costs one
// clock read. It returns the latest clock reading after it, a lower bound of the section's start.
//
// Tolerance: the reading lags the clock by the time since the allocator's last operation (the caller's
// idle time between sections). The lag never makes a section unsafe: what makes it safe is that
// the announcement stood, unexpired, throughout, and Unpin establishes that with a fresh clock
// reading: the lease's deadline is fixed when it is announced (only a new announcement or
// Renew moves it, later), and the clock is monotonic, so a lease valid at Unpin was valid at
// every instant of the section; otherwise Unpin returns ErrPinExpired and the caller reads
// again, as after any pin that outlived its lease. The lag only delays a refresh that was
// due: after an Unpin the announcement is either withdrawn or younger than Refresh, so an idle
// time of up to Lease-Refresh-ClockSkew minus the section's length costs nothing, and a longer
// one costs the section after it a retry (the retry's PinCoarse, at Unpin's fresh reading,
// refreshes). It also refreshes whenever the lease has run out by that reading, so retries end.
func (a *Allocator) PinCoarse(ctx context.Context) (farmem.Time, error) {
	// The common case, with no call: the outermost pin of an open allocator whose
	// announcement needs no refresh (quiet implies not lapsed).
	if ep := &a.ep; !a.closed && ep.depth == 0 && a.quiet(ep.seen) {
		ep.depth = 1
		ep.section++
		return ep.seen, nil
	}
	return a.pinCoarse(ctx)
}

// pinCoarse is PinCoarse but for its common case.
func (a *Allocator) pinCoarse(ctx context.Context) (farmem.Time, error) {
	ep := &a.ep
	if a.closed || ep.depth != 0 {
		if _, err := a.nestPin(); err != nil {
			return 0, err
		}
		return ep.seen, nil
	}
	if !ep.announced || ep.seen.Sub(ep.annAt) >= a.opts.Refresh || !a.valid(ep.seen) {
		if err := a.announce(ctx, a.rt.Now()); err != nil {
			return 0, err
		}
	}
	ep.depth = 1
	ep.section++
	ep.lapsed = false
	return ep.seen, nil
}

// UnpinSeen is Unpin at the latest clock reading of this allocator instead of a fresh one, for
// a section whose last access came before that reading: a section that ends with a Retire
// (which reads the clock after the unlink it follows) costs one clock reading less. Its
// verdict is Unpin's for that instant: the lease's deadline is fixed while the section runs
// and the clock is monotonic, so a lease valid then was valid at every earlier instant of the
// section; the announcement's refresh and withdrawal are decided by the same reading. On a
// section whose last access came after the latest reading its verdict could miss an expiry:
// call Unpin there.
func (a *Allocator) UnpinSeen() error {
	// endSection's common case, with no call (its seen = max(seen, seen) changes nothing).
	if ep := &a.ep; !a.closed && ep.depth == 1 && a.quiet(ep.seen) {
		ep.depth = 0
		return nil
	}
	if a.closed || a.ep.depth != 1 {
		return a.unpin(true)
	}
	return a.endSection(a.ep.seen)
}

// NoteClock tells the allocator of a reading of its runtime's clock that the caller took
// (Runtime.Now, on this allocator's Memory), so that the next PinCoarse and UnpinSeen may use it
// when it is later than their own last one. A section that reads the clock for a budget of its
// own (say before a CAS that depends on what it read) can then end with UnpinSeen and cost no
// reading more; the next PinCoarse's lower bound of its start is then that reading. It costs no
// verb and no reading; a reading not later than the allocator's last one changes nothing, and
// one from another clock (a time in the future) makes UnpinSeen's verdict and the announcement's
// refresh wrong: pass only the runtime's own readings.
func (a *Allocator) NoteClock(now farmem.Time) {
	a.ep.seen = max(a.ep.seen, now)
}
