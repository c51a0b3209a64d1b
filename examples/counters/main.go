// Command counters is the first farmem program to run: several clients on two compute nodes
// increment shared far counters, one with FAA and one with a read-CAS retry loop, then check
// the totals and print what the increments cost in counted round trips.
//
//	go run ./examples/counters
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

func main() {
	clients := flag.Int("clients", 8, "clients, spread over two compute nodes")
	ops := flag.Int("ops", 2000, "increments per client and counter")
	latency := flag.Duration("latency", 0, "modelled round-trip time per batch (e.g. 2us)")
	flag.Parse()
	if err := run(*clients, *ops, *latency); err != nil {
		fmt.Fprintln(os.Stderr, "counters:", err)
		os.Exit(1)
	}
}

func run(clients, ops int, latency time.Duration) error {
	if clients < 1 || ops < 1 {
		return fmt.Errorf("need at least one client and one op")
	}
	fabric, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2, ClientsPerNode: clients + 16}, Latency: latency})
	if err != nil {
		return err
	}
	defer fabric.Close()
	ctx := context.Background()
	// Two counters on two memory nodes, clear of the node headers.
	faaCounter := farmem.MakeAddr(fabric.Topology().MemoryNodes()[0], 4096)
	casCounter := farmem.MakeAddr(fabric.Topology().MemoryNodes()[1], 4096)

	ms := make([]farmem.Memory, clients)
	for i := range ms {
		node := fabric.Hosted()[i%len(fabric.Hosted())]
		if ms[i], err = fabric.Open(ctx, node); err != nil {
			return err
		}
		defer ms[i].Close()
	}
	start := time.Now()
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- increment(ctx, m, faaCounter, casCounter, ops)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	s := fabric.Stats() // the increments' costs, before the checking reads below

	var buf [8]byte
	want := uint64(clients * ops)
	for _, c := range []struct {
		name string
		a    farmem.Addr
	}{{"FAA", faaCounter}, {"CAS", casCounter}} {
		if err := ms[0].Read(ctx, c.a, buf[:]); err != nil {
			return err
		}
		got := binary.LittleEndian.Uint64(buf[:])
		status := "ok"
		if got != want {
			status = "LOST UPDATES"
		}
		fmt.Printf("%s counter at %v: %d (want %d) %s\n", c.name, c.a, got, want, status)
		if got != want {
			return fmt.Errorf("%s counter is %d, want %d", c.name, got, want)
		}
	}
	incs := float64(2 * clients * ops)
	fmt.Printf("\n%d clients x %d increments of each counter in %v\n", clients, ops, elapsed.Round(time.Millisecond))
	fmt.Printf("round trips:        %d (%.2f per increment)\n", s.RoundTrips, float64(s.RoundTrips)/incs)
	fmt.Printf("  FAA verbs:        %d (1 round trip per increment)\n", s.VerbsOf(farmem.OpFAA))
	fmt.Printf("  CAS verbs:        %d, of which failed: %d (%.2f CAS per increment under contention)\n",
		s.VerbsOf(farmem.OpCAS), s.FailedCAS, float64(s.VerbsOf(farmem.OpCAS))/float64(clients*ops))
	fmt.Printf("  reads:            %d (one per client, to seed its CAS loop)\n", s.VerbsOf(farmem.OpRead))
	fmt.Printf("bytes out / in:     %d / %d\n", s.BytesOut, s.BytesIn)
	return nil
}

// increment adds ops to each counter: with FAA (one verb each) and with a CAS loop (one verb
// each when uncontended, more when another client got there first).
func increment(ctx context.Context, m farmem.Memory, faa, cas farmem.Addr, ops int) error {
	var buf [8]byte
	if err := m.Read(ctx, cas, buf[:]); err != nil {
		return err
	}
	cur := binary.LittleEndian.Uint64(buf[:])
	for range ops {
		if _, err := m.FAA(ctx, faa, 1); err != nil {
			return err
		}
		for {
			prev, err := m.CAS(ctx, cas, cur, cur+1)
			if err != nil {
				return err
			}
			if prev == cur {
				cur++
				break
			}
			cur = prev // another client won: retry from what it left
		}
	}
	return nil
}
