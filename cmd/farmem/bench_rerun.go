package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/farmem/farmem/bench"
	"github.com/farmem/farmem/kvstore"
)

// optDuration is a duration flag whose default depends on other flags: it remembers whether
// it was set, and prints no default of its own in -h (the flag's text states it).
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want a duration such as 500ms or 3s")
	}
	o.d, o.set = d, true
	return nil
}

// parseProcess parses --process i/n ("" is 0/1).
func parseProcess(v string) (part, parts int, err error) {
	if v == "" {
		return 0, 1, nil
	}
	a, b, ok := strings.Cut(v, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, usageErr("--process %q: want i/n with 0 <= i < n, e.g. 0/2 and 1/2 for two processes", v)
	}
	return i, n, nil
}

// splitRecords narrows w's records to part of parts contiguous ranges (insertstart and
// insertcount), so that processes running the workload at once on one store each load and use
// their own keys.
func splitRecords(w *bench.Workload, part, parts int) (*bench.Workload, error) {
	if parts == 1 {
		return w, nil
	}
	lo := w.InsertStart + int64(part)*w.InsertCount/int64(parts)
	hi := w.InsertStart + int64(part+1)*w.InsertCount/int64(parts)
	if hi <= lo {
		return nil, usageErr("--process %d/%d: %d records do not split %d ways", part, parts, w.InsertCount, parts)
	}
	nw, err := w.With(map[string]string{"insertstart": strconv.FormatInt(lo, 10), "insertcount": strconv.FormatInt(hi-lo, 10)})
	if err != nil {
		return nil, usageErr("--process: %v", err)
	}
	return nw, nil
}

// recordsLoaded reports whether store holds w's records already: the first and the last key of
// its load range are both there (a run loads them in contiguous ranges, so a complete earlier
// load has both). One present and the other absent is an earlier load that did not complete.
func recordsLoaded(ctx context.Context, store *kvstore.Store, w *bench.Workload) (bool, error) {
	first, last := w.InsertStart, w.InsertStart+w.InsertCount-1
	has := func(k int64) (bool, error) {
		key, err := w.AppendKey(nil, k)
		if err != nil {
			return false, err
		}
		_, err = store.Get(ctx, key)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, kvstore.ErrNotFound):
			return false, nil
		}
		return false, fmt.Errorf("look for record %d: %w", k, err)
	}
	a, err := has(first)
	if err != nil {
		return false, err
	}
	b, err := has(last)
	if err != nil {
		return false, err
	}
	if a != b {
		return false, fmt.Errorf("the store holds part of records %d..%d (an earlier load did not complete, or another process is loading them): pass --skip-load to run on what is there, or --process i/n to use other keys", first, last)
	}
	return a, nil
}

// failures turns failed operations and loads in the reports into the command's error: how
// many operations failed, of how many, and the first failure (the table has the details). A
// report in which no store could run the workload (workload E with neither an ordered index
// nor peers) is a failure too: nothing was measured.
func failures(reports []*bench.Report) error {
	var failed, total uint64
	var incomplete, unrunnable []string
	first := ""
	for _, r := range reports {
		ran := false
		for _, row := range r.Rows {
			total += row.Ops + row.Errors
			failed += row.Errors
			if first == "" && row.FirstError != "" {
				first = fmt.Sprintf("%s %s: %s", row.Store, row.Phase, row.FirstError)
			}
			if row.Error != "" {
				incomplete = append(incomplete, fmt.Sprintf("%s %s %s did not complete: %s", row.Store, row.Workload, row.Phase, row.Error))
			}
			ran = ran || row.Unsupported == ""
		}
		if !ran && len(r.Rows) > 0 {
			unrunnable = append(unrunnable, fmt.Sprintf("no store could run workload %s (%s)", r.Workload, r.Rows[0].Unsupported))
		}
	}
	var parts []string
	if failed > 0 || len(incomplete) > 0 {
		msg := fmt.Sprintf("%d of %d operations failed", failed, total)
		if first != "" {
			msg += " (the first: " + first + ")"
		}
		parts = append(parts, msg)
	}
	parts = append(parts, incomplete...)
	parts = append(parts, unrunnable...)
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}
