package alloc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
)

// MaxReclaimWait returns the longest an allocation that found no room waits for blocks this
// client retired to become reusable, in fabric time: one Lease (a reader that stalled, or
// crashed, holds its epoch back that long), two Refresh periods (the global epoch advances
// once every live client has announced it again, and a block's tag is one past its retirer's
// announcement), ClockSkew, and four units of the epoch table's clock (its deadlines are
// rounded to about 1.05ms); or Options.ReclaimWait if that is shorter.
func (a *Allocator) MaxReclaimWait() time.Duration {
	d := a.opts.Lease + 2*a.opts.Refresh + a.opts.ClockSkew + 4*(1<<unitShift)
	if w := a.opts.ReclaimWait; w > 0 && w < d {
		return w
	}
	return d
}

// reclaimBackoffMin is the first pause of a reclamation wait; pauses double up to Refresh.
const reclaimBackoffMin = 100 * time.Microsecond

// waitReclaim retries an allocation that failed with err (wrapping farmem.ErrNoSpace): first
// once more after taking over what closed clients of other ids handed over (adoptOrphans), if
// it took anything, and then while this client has retired blocks not yet reusable: it sleeps on the fabric's clock with exponential
// backoff (from reclaimBackoffMin to Refresh), and every try scans the epoch table on its own
// (allocArena scans when it runs out of chunks), which also advances the global epoch once
// every live client has announced it. It gives up, returning the last error, once
// MaxReclaimWait has passed since the first failure, when nothing is pending any more, or when
// the error is another one (a node down, a cancelled context). An allocation that never runs
// out of room never gets here, so it costs nothing then.
//
// Outside a pinned section the client's announcement is withdrawn first (one round trip).
// Inside a pinned section the client's own announcement holds back only the blocks retired in
// that section (see reuseBelow): those retired before it are reused as soon as the other
// clients' announcements allow. The wait does not renew the lease, so a section that outlives
// it ends in ErrPinExpired (its blocks then become reusable, and the caller retries the
// operation).
func waitReclaim[T any](ctx context.Context, a *Allocator, v T, err error, try func() (T, error)) (T, error) {
	if err == nil || !errors.Is(err, farmem.ErrNoSpace) {
		return v, err
	}
	// What closed clients of other ids handed over comes first: it may be usable at once.
	if a.adoptOrphans(ctx) {
		if v, err = try(); err == nil || !errors.Is(err, farmem.ErrNoSpace) {
			return v, err
		}
	}
	if len(a.ep.retired) == 0 {
		return v, err
	}
	// An idle client's announcement younger than Refresh stands until its lease ends: withdrawn
	// here, so that two clients waiting at once do not hold each other's blocks back.
	if a.ep.depth == 0 && a.ep.announced {
		if qerr := a.Quiesce(ctx); qerr != nil {
			return v, errors.Join(err, qerr)
		}
	}
	start := a.rt.Now()
	end := start.Add(a.MaxReclaimWait())
	pause := min(reclaimBackoffMin, a.opts.Refresh)
	for {
		now := a.rt.Now()
		if now >= end {
			return v, fmt.Errorf("alloc: waited %v for %d retired blocks to become reusable: %w", now.Sub(start), len(a.ep.retired), err)
		}
		if serr := a.rt.Sleep(ctx, min(pause, end.Sub(now))); serr != nil {
			return v, fmt.Errorf("alloc: waiting for retired blocks: %w: %w", serr, err)
		}
		pause = min(2*pause, a.opts.Refresh)
		a.stats.ReclaimWaits++
		a.adoptOrphans(ctx) // at most once per Refresh
		v, err = try()
		if err == nil || !errors.Is(err, farmem.ErrNoSpace) || len(a.ep.retired) == 0 {
			return v, err
		}
	}
}
