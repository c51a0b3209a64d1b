// Command visits is the program of docs/typed.md, "far memory in a Go program": a web-visit
// tracker whose state lives in far memory and is reached only through typed values, with no
// hand encoding. Workers process simulated requests and keep
//
//   - the total number of requests in a far.Counter (sharded across memory nodes when hot),
//   - the count of slow requests in a far.Uint64,
//   - a latency histogram per worker, one row of a farcoll.Array each, written in one round
//     trip at the end and read whole in one round trip,
//   - per-page statistics in a farcoll.Map over kvstore, keyed by page path,
//   - the slow requests themselves as events in a farcoll.Queue, drained by a consumer,
//   - and read the configuration from a far.Ptr (out of place: readers are wait-free while an
//     operator changes it).
//
// At the end it checks that every view agrees with the others and prints what the work cost in
// counted round trips. The same code runs over any fabric; only how the fabric is opened
// changes:
//
//	go run ./examples/visits -fabric cxl    # a shared-memory region (emulated CXL)
//	go run ./examples/visits -fabric tcp    # two memory nodes served over loopback TCP
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/far/farcoll"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/rdma"
)

// Config is the tracker's configuration, read by every worker for every request.
type Config struct {
	SlowMicros int64 // a request slower than this is slow
	Pages      uint32
	Version    uint32
}

// PageStats are one page's statistics, a value of the far map.
type PageStats struct {
	Hits      uint64
	TotalUS   uint64
	SlowestUS int64
}

// Event is a slow request, sent through the far queue.
type Event struct {
	Worker uint32
	Page   uint32
	US     int64
}

// pageCount is the number of pages; each worker owns some, so there are at most as many workers.
const pageCount = 16

const buckets = 8 // latency histogram buckets: <50us, <100, <200, ... (doubling), rest

func main() {
	fabricName := flag.String("fabric", "cxl", "cxl (a shared-memory region) or tcp (in-process memory nodes over loopback)")
	workers := flag.Int("workers", 4, "worker goroutines")
	requests := flag.Int("requests", 500, "requests per worker")
	flag.Parse()
	ctx := context.Background()
	fabric, closeFabric, err := open(ctx, *fabricName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "visits:", err)
		os.Exit(1)
	}
	defer closeFabric()
	r, err := run(ctx, fabric, *workers, *requests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "visits:", err)
		os.Exit(1)
	}
	fmt.Print(r)
}

// open opens the fabric by name: the only part of the program that knows which it is.
func open(ctx context.Context, name string) (farmem.Fabric, func(), error) {
	switch name {
	case "cxl":
		region, err := cxl.CreateTemp("", "visits-*", cxl.Options{Shape: cxl.Shape{MemoryNodes: 2, MemorySize: 32 << 20, ComputeNodes: 2}})
		if err != nil {
			return nil, nil, err
		}
		f, err := region.Attach(cxl.OpenOptions{})
		if err != nil {
			_ = region.Close()
			return nil, nil, err
		}
		return f, func() { _ = f.Close(); _ = region.Close() }, nil
	case "tcp":
		secret := []byte("visits-example-secret-0123456789")
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		var lines []string
		var servers []*rdma.Server
		closeAll := func() {
			for _, s := range servers {
				_ = s.Close()
			}
		}
		for id := 1; id <= 2; id++ {
			s, err := rdma.NewServer(rdma.ServerOptions{Node: farmem.NodeID(id), Size: 32 << 20, Secret: secret, Logger: quiet})
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			servers = append(servers, s)
			addr, err := s.Listen("127.0.0.1:0")
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			lines = append(lines, fmt.Sprintf("memory %d %s", id, addr))
		}
		cl, err := rdma.ParseCluster(strings.NewReader(strings.Join(lines, "\n") + "\n"))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		f, err := rdma.Dial(ctx, cl, rdma.Options{Secret: secret, Logger: quiet})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return f, func() { _ = f.Close(); closeAll() }, nil
	}
	return nil, nil, fmt.Errorf("unknown fabric %q (cxl or tcp)", name)
}

// Result is what a run found.
type Result struct {
	Requests, Slow, Events uint64
	Histogram              [buckets]uint64
	Pages                  map[string]PageStats
	CounterWidth           int
	Stats                  farmem.Stats
	Elapsed                time.Duration
}

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests (%d slow, %d slow events dequeued) in %v\n", r.Requests, r.Slow, r.Events, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "latency histogram: %v\n", r.Histogram)
	fmt.Fprintf(&b, "pages: %d; counter spread over %d shards\n", len(r.Pages), r.CounterWidth)
	fmt.Fprintf(&b, "round trips: %d (%.2f per request); verbs: %d\n", r.Stats.RoundTrips,
		float64(r.Stats.RoundTrips)/float64(max(r.Requests, 1)), r.Stats.TotalVerbs())
	return b.String()
}

// run is the program proper: the same code over any fabric.
func run(ctx context.Context, fabric farmem.Fabric, workers, requests int) (*Result, error) {
	if workers < 1 || workers > pageCount || requests < 1 {
		return nil, fmt.Errorf("need 1 to %d workers and at least one request", pageCount)
	}
	start := time.Now()
	node := fabric.Hosted()[0]
	newClient := func() (*far.Client, func(), error) {
		m, err := fabric.Open(ctx, node)
		if err != nil {
			return nil, nil, err
		}
		c, err := far.NewClient(ctx, m, far.Options{})
		if err != nil {
			_ = m.Close()
			return nil, nil, err
		}
		return c, func() { _ = c.Close(); _ = m.Close() }, nil
	}
	c, done, err := newClient()
	if err != nil {
		return nil, err
	}
	defer done()

	// The shared state, made by one client and used by all.
	cfg, err := far.NewPtr(ctx, c, Config{SlowMicros: 400, Pages: pageCount, Version: 1}, far.PtrOptions[Config]{Mode: far.OutOfPlace})
	if err != nil {
		return nil, err
	}
	total, err := far.NewCounter(ctx, c, far.CounterOptions{HotAdds: 64})
	if err != nil {
		return nil, err
	}
	slow, err := far.NewUint64(ctx, c, 0, 0)
	if err != nil {
		return nil, err
	}
	hist, err := farcoll.NewArray(ctx, c, workers*buckets, farcoll.ArrayOptions[uint64]{Nodes: fabric.Topology().MemoryNodes()})
	if err != nil {
		return nil, err
	}
	events, err := farcoll.NewQueue(ctx, c, 32, farcoll.QueueOptions[Event]{})
	if err != nil {
		return nil, err
	}
	store, err := kvstore.Open(ctx, fabric, kvstore.Options{})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	pages, err := farcoll.NewMap[string, PageStats](store, nil, nil)
	if err != nil {
		return nil, err
	}

	// Workers and one consumer of slow events, each with its own client, opened here one after
	// another (the fabric hands out client slots; opening them all before starting keeps a
	// failure to get one out of the goroutines).
	clients := make([]*far.Client, workers+1)
	for i := range clients {
		cc, done, err := newClient()
		if err != nil {
			return nil, err
		}
		defer done()
		clients[i] = cc
	}
	errs := make(chan error, workers+1)
	consumed := make(chan uint64, 1)
	finished := make(chan struct{})
	go func() {
		errs <- func() error {
			cc := clients[workers]
			n, stop := uint64(0), false
			for {
				_, err := events.Dequeue(ctx, cc)
				switch {
				case err == nil:
					n++
					continue
				case !errors.Is(err, farcoll.ErrEmpty):
					return err
				case stop:
					consumed <- n
					return nil
				}
				select {
				case <-finished:
					stop = true // one more pass: everything enqueued before finished is there
				case <-time.After(50 * time.Microsecond):
				}
			}
		}()
	}()
	for w := range workers {
		go func() {
			errs <- worker(ctx, clients[w], w, workers, requests, cfg, total, slow, hist, events, pages)
		}()
	}
	var firstErr error
	for range workers {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	close(finished)
	if err := <-errs; err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return nil, firstErr // every goroutine is done: the clients may close
	}

	// Read every view back and check that they agree.
	res := &Result{Events: <-consumed, Pages: map[string]PageStats{}}
	if res.Requests, err = total.Read(ctx, c); err != nil {
		return nil, err
	}
	if res.Slow, err = slow.Load(ctx, c); err != nil {
		return nil, err
	}
	rows := make([]uint64, workers*buckets)
	if err := hist.ReadRange(ctx, c, 0, rows); err != nil {
		return nil, err
	}
	var histTotal uint64
	for i, v := range rows {
		res.Histogram[i%buckets] += v
		histTotal += v
	}
	conf, err := cfg.Load(ctx, c)
	if err != nil {
		return nil, err
	}
	var hits uint64
	for p := range conf.Pages {
		st, err := pages.Get(ctx, pagePath(p))
		if errors.Is(err, kvstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		res.Pages[pagePath(p)] = st
		hits += st.Hits
	}
	want := uint64(workers * requests)
	switch {
	case res.Requests != want:
		return nil, fmt.Errorf("counter says %d requests, want %d", res.Requests, want)
	case histTotal != want:
		return nil, fmt.Errorf("histogram holds %d requests, want %d", histTotal, want)
	case hits != want:
		return nil, fmt.Errorf("pages hold %d hits, want %d", hits, want)
	case res.Events != res.Slow:
		return nil, fmt.Errorf("%d slow events dequeued, %d slow requests counted", res.Events, res.Slow)
	}
	res.CounterWidth = total.Width()
	res.Stats = fabric.Stats()
	res.Elapsed = time.Since(start)
	return res, nil
}

func pagePath(p uint32) string { return fmt.Sprintf("/page/%d", p) }

// worker serves requests: worker w owns the pages p with p % workers == w, so it is the only
// writer of their map entries, and the row w of the histogram.
func worker(ctx context.Context, c *far.Client, w, workers, requests int,
	cfg far.Ptr[Config], total *far.Counter, slow far.Uint64, hist *farcoll.Array[uint64],
	events *farcoll.Queue[Event], pages *farcoll.Map[string, PageStats]) error {
	var row [buckets]uint64
	mine := map[string]PageStats{}
	for i := range requests {
		conf, err := cfg.Load(ctx, c) // wait-free: two reads
		if err != nil {
			return err
		}
		// A simulated request: a page of this worker's, a latency from a fixed pattern.
		page := uint32((i*7 + w*13) % int(conf.Pages))
		for j := i + 1; int(page)%workers != w; j++ {
			page = uint32((j*7 + w*13) % int(conf.Pages)) // 7 and 16 are coprime: all pages come
		}
		us := int64(20 + (i*37+w*11)%600)
		if err := total.Add(ctx, c, 1); err != nil {
			return err
		}
		row[bucketOf(us)]++
		st := mine[pagePath(page)]
		st.Hits++
		st.TotalUS += uint64(us)
		st.SlowestUS = max(st.SlowestUS, us)
		mine[pagePath(page)] = st
		if us > conf.SlowMicros {
			if _, err := slow.Add(ctx, c, 1); err != nil {
				return err
			}
			ev := Event{Worker: uint32(w), Page: page, US: us}
			for {
				err := events.Enqueue(ctx, c, ev)
				if !errors.Is(err, farcoll.ErrFull) {
					if err != nil {
						return err
					}
					break
				}
				time.Sleep(20 * time.Microsecond) // the consumer is behind
			}
		}
		if i == requests/2 && w == 0 {
			// An operator's change, mid-run: readers see the old or the new block, never a mix.
			conf.Version++
			if err := cfg.Store(ctx, c, conf); err != nil {
				return err
			}
		}
	}
	if err := hist.WriteRange(ctx, c, w*buckets, row[:]); err != nil { // one round trip
		return err
	}
	for path, st := range mine {
		if err := pages.Put(ctx, path, st); err != nil {
			return err
		}
	}
	return nil
}

func bucketOf(us int64) int {
	b, limit := 0, int64(50)
	for b < buckets-1 && us >= limit {
		b, limit = b+1, limit*2
	}
	return b
}
