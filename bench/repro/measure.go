package repro

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// runSeeds runs one point's seeds: run once per seed, at most workers (at least one) at once,
// each an independent simulation, with the results and errors returned in seed order so that
// what the caller folds from them does not depend on workers. It stops launching seeds when
// ctx is done and returns ctx's error then, without waiting for the seeds already running.
func runSeeds[R any](ctx context.Context, seeds []uint64, workers int, run func(seed uint64) (R, error)) ([]R, []error, error) {
	runs := make([]R, len(seeds))
	errs := make([]error, len(seeds))
	sem := make(chan struct{}, max(1, workers))
	var wg sync.WaitGroup
	for i, seed := range seeds {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			runs[i], errs[i] = run(seed)
		}()
	}
	wg.Wait()
	return runs, errs, nil
}

// eachSeed is runSeeds for a figure whose seeds must all succeed: it returns the runs in seed
// order, or the first seed's error, prefixed with what ("flexkv fig. 19") and the seed; report
// (if not nil) sees each run, in seed order, once all are done.
func eachSeed[R any](ctx context.Context, seeds []uint64, workers int, what string, run func(seed uint64) (R, error), report func(R)) ([]R, error) {
	runs, errs, err := runSeeds(ctx, seeds, workers, run)
	if err != nil {
		return nil, err
	}
	for i, r := range runs {
		if errs[i] != nil {
			return nil, fmt.Errorf("repro: %s, seed %d: %w", what, seeds[i], errs[i])
		}
		if report != nil {
			report(r)
		}
	}
	return runs, nil
}

// check reports a warm-up or window that cannot end or cannot converge, wrapping ErrConfig.
func (m Measure) check() error {
	switch {
	case m.Step <= 0 || m.MinWarmup < 0 || m.MaxWarmup < m.MinWarmup || m.Tolerance <= 0:
		return fmt.Errorf("%w: warm-up: step %v, %v to %v, tolerance %v", ErrConfig, m.Step, m.MinWarmup, m.MaxWarmup, m.Tolerance)
	case m.MinWindow <= 0 || m.MaxWindow < m.MinWindow:
		return fmt.Errorf("%w: window %v to %v", ErrConfig, m.MinWindow, m.MaxWindow)
	}
	return nil
}

// warmUp is the controller's warm-up of a closed-loop measurement, run inside the simulation
// while the clients count their completions in *done. Every step of virtual time it reads the
// step's completions: a step with fewer than ms.StepOps doubles the step (up to 16 ms.Step)
// and starts the rates over; otherwise the warm-up has converged once it has lasted
// ms.MinWarmup and the last three steps' rates lie within ms.Tolerance of each other. It ends
// unconverged at ms.MaxWarmup, or at once when halt (if not nil) is set. It returns whether it
// converged and how long it took.
//
// perStep compares completions per step rather than per nanosecond: the same test, since the
// three rates always share one step, but rounded differently, and each reproduction keeps the
// arithmetic its published figures were made with.
func warmUp(ctx context.Context, rt farmem.Runtime, ms Measure, done *uint64, halt *bool, perStep bool) (bool, time.Duration) {
	t0 := rt.Now()
	step := ms.Step
	var rates []float64
	last := *done
	for {
		_ = rt.Sleep(ctx, step)
		n := *done - last
		last = *done
		elapsed := rt.Now().Sub(t0)
		if elapsed >= ms.MaxWarmup || (halt != nil && *halt) {
			return false, rt.Now().Sub(t0)
		}
		if n < ms.StepOps {
			if step < 16*ms.Step {
				step *= 2
			}
			rates = rates[:0]
			continue
		}
		if perStep {
			rates = append(rates, float64(n))
		} else {
			rates = append(rates, float64(n)/float64(step))
		}
		if k := len(rates); k >= 3 && elapsed >= ms.MinWarmup {
			if slices.Max(rates[k-3:]) <= (1+ms.Tolerance)*slices.Min(rates[k-3:]) {
				return true, rt.Now().Sub(t0)
			}
		}
	}
}

// measureWindow is the controller's measurement window, run inside the simulation once the
// caller has opened it (from is when): it waits in steps of ms.Step until the window has
// lasted ms.MinWindow and holds ms.MinOps operations (*ops), or has lasted ms.MaxWindow, or
// halt (if not nil) is set. The caller closes it.
func measureWindow(ctx context.Context, rt farmem.Runtime, ms Measure, from farmem.Time, ops *uint64, halt *bool) {
	for {
		_ = rt.Sleep(ctx, ms.Step)
		w := rt.Now().Sub(from)
		if (w >= ms.MinWindow && *ops >= ms.MinOps) || w >= ms.MaxWindow || (halt != nil && *halt) {
			return
		}
	}
}

// openClient opens node's Memory on s and an allocator of opts on it, as one client of a
// reproduction; closing closes the allocator, then the Memory. On an error it closes what it
// opened.
func openClient(ctx context.Context, s *sim.Sim, node farmem.NodeID, opts alloc.Options) (farmem.Memory, *alloc.Allocator, func(), error) {
	m, err := s.Open(ctx, node)
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := alloc.New(ctx, m, opts)
	if err != nil {
		_ = m.Close()
		return nil, nil, nil, err
	}
	return m, a, func() { _ = a.Close(); _ = m.Close() }, nil
}

// seedRatios is a over b, seed by seed (same seed, same draws; a zero b counts as one): the
// mean of the per-seed ratios with its 95% confidence half-width, over the seeds both have.
func seedRatios(a, b []float64) (mean, half float64) {
	k := min(len(a), len(b))
	rs := make([]float64, 0, k)
	for i := range k {
		rs = append(rs, a[i]/math.Max(1, b[i]))
	}
	return MeanCI(rs)
}
