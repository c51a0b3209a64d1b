package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/farmem/farmem/kvstore"
)

// processWait bounds how long a process of a multi-process FlexKV benchmark waits for the
// others to attach.
const processWait = 2 * time.Minute

// awaitProcesses, for a FlexKV store run by n processes at once (--process i/n) on a fabric
// that can count its attached compute nodes (cxl), waits until n are attached before the
// benchmark starts, so that the manager's hand-overs reach every process (a hand-over pauses
// every compute node of the region, and rolls back while one is not attached) and the
// processes' measured runs overlap. A process that starts late (the second one often loses the
// race to create the region, and formats its own copy in full before it finds out) would
// otherwise run alone. It gives up after processWait.
func awaitProcesses(ctx context.Context, f *openedFabric, process, index string, log io.Writer) error {
	_, parts, err := parseProcess(process)
	if err != nil || parts < 2 || index != "flexkv" || f.attached == nil {
		return err
	}
	deadline := time.Now().Add(processWait)
	said := false
	for {
		n, err := f.attached()
		if err != nil {
			return fmt.Errorf("count the attached compute nodes: %w", err)
		}
		if n >= parts {
			if said {
				fmt.Fprintf(log, "farmem: %d compute nodes attached: starting\n", n)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of the %d processes' compute nodes attached after %v", n, parts, processWait)
		}
		if !said {
			fmt.Fprintf(log, "farmem: waiting for the other processes (%d of %d compute nodes attached)\n", n, parts)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startManager runs FlexKV's manager beside a benchmark of a FlexKV store (every process of a
// multi-process run starts one; the lease lets one act), with a period of 100 ms and the knob
// starting at half the partitions proxied. It returns the function that stops it, hands this
// process's partitions back to the memory nodes (Store.Leave: the processes still running
// keep going; when this one hosts the coordinator, every partition goes back) and writes to
// log what this process's manager did (periods it acted in, hand-overs, the last ratio) and
// how many of its index operations went to proxies, and to other processes' ones. On a store
// of any other index kind (--index) it does nothing.
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
		st, _ := store.FlexStats()
		lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
		leaveErr := store.Leave(lctx)
		lcancel()
		mu.Lock()
		defer mu.Unlock()
		if periods == 0 {
			fmt.Fprintf(log, "farmem: flexkv manager: another process's manager held the lease\n")
		} else {
			fmt.Fprintf(log, "farmem: flexkv manager: acted in %d periods over %d compute nodes, %d hand-overs (%d rolled back), offload ratio %.1f, %.0f%% of accesses on proxied partitions in the last period\n",
				periods, len(last.Nodes), moved, failed, last.Next, 100*last.Proxied)
		}
		fmt.Fprintf(log, "farmem: flexkv: this process's clients sent %d index operations to proxies, %d of them to another compute node's (another process's on cxl); its proxy served %d\n",
			st.Proxied, st.Remote, st.Served)
		if leaveErr != nil {
			fmt.Fprintf(log, "farmem: flexkv: leave: %v\n", leaveErr)
		}
	}
}
