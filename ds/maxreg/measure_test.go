package maxreg_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/sim"
)

// sweepPoint is what one run of the metadata-word sweep measured.
type sweepPoint struct {
	words                     int
	writes, oneRTTWrites      uint64
	writeRTT, readRTT         float64 // mean round trips
	readP50, writeP50         time.Duration
	readBytes                 float64 // mean bytes read per read
	inPlace, chased, absorbed uint64
}

// sweep runs clients on a simulated ConnectX-6 cluster (one memory node, the clients spread
// over computeNodes compute nodes) hammering one register, writes percent of their operations
// writes (64-byte values), for k words, and measures the paper's §7.9 quantities: the share of
// one-round-trip writes and the latency of reads and writes, in virtual time.
func sweep(t *testing.T, k, clients, computeNodes, writes, ops int, seed uint64) sweepPoint {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 1, computeNodes, 2<<20
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	defer s.Close()
	pt := sweepPoint{words: k}
	var rlat, wlat []time.Duration
	var wrtt, rrtt, rbytes, reads uint64
	s.Run(func() {
		ctx := context.Background()
		addr := create(t, s, maxreg.Params{Words: k, ValueSize: 64})
		hs := make([]*handle, clients)
		for i := range hs {
			hs[i] = open(t, s, i, addr, maxreg.Options{}, nil)
		}
		type res struct {
			rl, wl                []time.Duration
			wrtt, rrtt, rb, reads uint64
			one                   uint64
		}
		out := make([]res, clients)
		require.NoError(t, s.Parallel(clients, func(i int) {
			h := hs[i]
			rng := h.m.Runtime().Rand()
			v := make([]byte, 64)
			o := &out[i]
			for range ops {
				t0 := s.Now()
				st := h.m.Stats()
				if rng.IntN(100) < writes {
					_, err := h.r.Write(ctx, v)
					require.NoError(t, err)
					d := h.m.Stats().Sub(st)
					o.wl = append(o.wl, s.Now().Sub(t0))
					o.wrtt += d.RoundTrips
					if d.RoundTrips == 1 {
						o.one++
					}
					continue
				}
				_, _, err := h.r.Read(ctx)
				require.NoError(t, err)
				d := h.m.Stats().Sub(st)
				o.rl = append(o.rl, s.Now().Sub(t0))
				o.rrtt += d.RoundTrips
				o.rb += d.BytesIn
				o.reads++
			}
		}))
		for i, o := range out {
			rlat, wlat = append(rlat, o.rl...), append(wlat, o.wl...)
			wrtt, rrtt, rbytes, reads = wrtt+o.wrtt, rrtt+o.rrtt, rbytes+o.rb, reads+o.reads
			pt.oneRTTWrites += o.one
			st := hs[i].r.Stats()
			pt.inPlace += st.InPlace
			pt.chased += st.Chased
			pt.absorbed += st.Absorbed
		}
	})
	pt.writes = uint64(len(wlat))
	pt.writeRTT = float64(wrtt) / float64(max(pt.writes, 1))
	pt.readRTT = float64(rrtt) / float64(max(reads, 1))
	pt.readBytes = float64(rbytes) / float64(max(reads, 1))
	pt.readP50, pt.writeP50 = median(rlat), median(wlat)
	return pt
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// TestWordsSweep measures k = 1, 4, 16 and 64 metadata words under a hot spot on one
// register, as the paper's §7.9 does: YCSB A's mix (50% writes) and B's (5%), 16 clients
// spread over two compute nodes (client ids 1..8 and 65..72, which share words under a plain
// client id mod k) and 64 clients over two. It prints the table the package doc's "Choosing k" quotes and checks its shape:
// more words never make writes cost more round trips, one word per writer makes every write
// one round trip, and reads grow by 8 bytes a word.
func TestWordsSweep(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	for _, c := range []struct{ clients, nodes int }{{16, 2}, {64, 2}} {
		for _, mix := range []struct {
			name   string
			writes int
		}{{"A", 50}, {"B", 5}} {
			var pts []sweepPoint
			for _, k := range []int{1, 4, 16, 64} {
				pts = append(pts, sweep(t, k, c.clients, c.nodes, mix.writes, 2400/c.clients, 1))
			}
			t.Logf("YCSB %s mix, %d clients on %d compute node(s):", mix.name, c.clients, c.nodes)
			t.Logf("%6s %14s %10s %10s %12s %12s %11s", "words", "1-RTT writes", "write RTT", "read RTT", "write p50", "read p50", "read bytes")
			for _, p := range pts {
				t.Logf("%6d %13.1f%% %10.2f %10.2f %12v %12v %11.0f", p.words, 100*float64(p.oneRTTWrites)/float64(max(p.writes, 1)),
					p.writeRTT, p.readRTT, p.writeP50, p.readP50, p.readBytes)
			}
			for i := 1; i < len(pts); i++ {
				require.Greater(t, pts[i].readBytes, pts[i-1].readBytes)
			}
			for _, p := range pts {
				if p.words >= c.clients {
					require.Equal(t, p.writes, p.oneRTTWrites, "k=%d, %d writers: every write one round trip", p.words, c.clients)
				}
			}
			require.Less(t, pts[1].writeRTT, pts[0].writeRTT)
		}
	}
}
