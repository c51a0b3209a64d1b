package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/farmem/farmem/kvstore"
)

// startManager runs FlexKV's manager beside a benchmark of a FlexKV store (every process of a
// multi-process run starts one; the lease lets one act), with a period of 100 ms and the knob
// starting at half the partitions proxied. It returns the function that stops it, waits for it
// and writes to log what this process's manager did (periods it acted in, hand-overs, the last
// ratio). On a store of any other index kind (--index) it does nothing.
func startManager(ctx context.Context, store *kvstore.Store, index string, log io.Writer) func() {
	if index != "flexkv" {
		return func() {}
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var mu sync.Mutex
	var periods, moved, failed int
	var last kvstore.ManagerPeriod
	go func() {
		defer close(done)
		_ = store.RunManager(mctx, kvstore.ManagerOptions{Period: 100 * time.Millisecond, Ratio: 0.5, Trace: func(p kvstore.ManagerPeriod) {
			mu.Lock()
			periods, moved, failed, last = periods+1, moved+p.Moved, failed+p.Failed, p
			mu.Unlock()
		}})
	}()
	return func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if periods == 0 {
			fmt.Fprintf(log, "farmem: flexkv manager: another process's manager held the lease\n")
			return
		}
		fmt.Fprintf(log, "farmem: flexkv manager: acted in %d periods over %d compute nodes, %d hand-overs (%d rolled back), offload ratio %.1f, %.0f%% of accesses on proxied partitions in the last period\n",
			periods, len(last.Nodes), moved, failed, last.Next, 100*last.Proxied)
	}
}
