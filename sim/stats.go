package sim

import (
	"fmt"
	"io"
	"math/bits"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/farmem/farmem/farmem"
)

// histogram records durations in virtual nanoseconds (HDR, 2 significant figures, up to an
// hour; larger values are recorded as an hour). It keeps the counts of an HDR histogram of that
// geometry itself, indexed as the library indexes them, so that recording a value (twice per
// simulated verb) is a few shifts and an add instead of the library's checked path; export
// hands the counts to the library, which builds the same histogram recording them one by one
// would have. The counts (36 KiB) are made on the first record: most NICs of a large cluster
// never wait, and a simulation has one histogram a NIC.
type histogram struct{ counts []int64 }

const histMax = int64(time.Hour)

// The geometry of hdrhistogram.New(1, histMax, 2): 2 significant figures need sub-buckets of
// 2^histSubMag values with unit resolution (the smallest power of two above 2*10^2), each
// further bucket of half as many sub-buckets covering twice the range of the previous one.
const (
	histSubMag  = 8 // log2 of the sub-bucket count
	histHalfMag = histSubMag - 1
	histSubMask = 1<<histSubMag - 1
)

// histTemplate is the library's export of an empty histogram of that geometry: the shape
// (and the length of the counts) every export carries.
var histTemplate = hdrhistogram.New(1, histMax, 2).Export()

func newHistogram() *histogram { return &histogram{} }

// histIndex is the index of value v (0 <= v <= histMax) among the counts: the library's
// countsIndexFor for this geometry.
func histIndex(v int64) int {
	bucket := 64 - bits.LeadingZeros64(uint64(v)|histSubMask) - histSubMag
	sub := int(v >> uint(bucket))
	return (bucket+1)<<histHalfMag + sub - 1<<histHalfMag
}

func (h *histogram) record(v int64) {
	if h.counts == nil {
		h.counts = make([]int64, len(histTemplate.Counts))
	}
	h.counts[histIndex(min(max(v, 0), histMax))]++
}

func (h *histogram) reset() { clear(h.counts) }

func (h *histogram) export() *hdrhistogram.Histogram {
	snap := *histTemplate
	snap.Counts = h.counts // Import copies them (none: all zero)
	return hdrhistogram.Import(&snap)
}

// Report is a snapshot of the simulation's counters over the statistics window: from the last
// ResetStats (or the start) to now, in virtual time.
type Report struct {
	Model   string
	Start   farmem.Time
	End     farmem.Time
	Elapsed time.Duration
	// Stats is the fabric's counted costs in the window, summed over every client.
	Stats   farmem.Stats
	Clients []ClientReport
	NICs    []NICReport
	Cores   []CoreReport
	// Latency is the distribution of round trips (post to answer of a batch's part to one
	// node, or of a single verb) in the window, in nanoseconds.
	Latency *hdrhistogram.Histogram
}

// ClientReport is one client's counters in the window.
type ClientReport struct {
	ID      farmem.ClientID
	Node    farmem.NodeID
	Handler bool
	Stats   farmem.Stats
	// Answers counts answered round trips; MeanLatency and MaxLatency are theirs.
	Answers     uint64
	MeanLatency time.Duration
	MaxLatency  time.Duration
}

// NICReport is one NIC's counters in the window.
type NICReport struct {
	Node farmem.NodeID
	// Ops counts inbound verbs served, by kind; Messages inbound Call messages; Issued
	// outbound ops and messages; Bytes payload bytes through the port.
	Ops      [farmem.NumOpKinds]uint64
	Messages uint64
	Issued   uint64
	Bytes    uint64
	// Busy is the processing-unit time consumed; Utilisation is Busy over the window times the
	// number of units.
	Busy        time.Duration
	Utilisation float64
	// MeanWait and MaxWait are the queueing delays in front of the units; Wait their
	// distribution in nanoseconds.
	MeanWait time.Duration
	MaxWait  time.Duration
	Wait     *hdrhistogram.Histogram
}

// Served is the number of inbound requests (verbs and messages) the NIC served.
func (n NICReport) Served() uint64 {
	t := n.Messages
	for _, v := range n.Ops {
		t += v
	}
	return t
}

// CoreReport is one compute node core's counters in the window.
type CoreReport struct {
	Node        farmem.NodeID
	Core        int
	Jobs        uint64
	Busy        time.Duration
	Utilisation float64
	// MeanWait and MaxWait are the node's queueing delays for a core (the same for each of
	// its cores).
	MeanWait time.Duration
	MaxWait  time.Duration
}

// ResetStats starts a new statistics window at the current virtual time (after a warm-up, for
// instance): the NIC, core and latency counters restart, and client Stats in reports are
// counted from here. Clients' own Stats() are cumulative and unaffected.
func (s *Sim) ResetStats() {
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	s.resetStats()
}

func (s *Sim) resetStats() {
	s.statsFrom = s.nowNs
	s.verbHist.reset()
	for _, n := range s.allNodes() {
		st := n.nic
		st.ops = [farmem.NumOpKinds]uint64{}
		st.sends, st.issued, st.bytes, st.busy, st.queued, st.maxWait, st.noWait = 0, 0, 0, 0, 0, 0, 0
		st.hist.reset()
		if n.c != nil {
			cs := &n.c.cpu
			for k := range cs.cores {
				cs.cores[k].busy, cs.cores[k].jobs = 0, 0
			}
			cs.queued, cs.maxWait = 0, 0
		}
	}
	for _, c := range s.clients.Clients() {
		c.base = c.ctr.Snapshot()
		c.lat = latStats{}
	}
	s.baseClosed = s.clients.Released()
}

func (s *Sim) allNodes() []*node {
	ns := make([]*node, 0, len(s.mem)+len(s.comp)-2)
	ns = append(ns, s.mem[1:]...)
	return append(ns, s.comp[1:]...)
}

// Report returns the counters of the statistics window.
func (s *Sim) Report() *Report {
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	return s.report()
}

func (s *Sim) report() *Report {
	r := &Report{
		Model:   s.m.Name,
		Start:   farmem.Time(s.statsFrom),
		End:     farmem.Time(s.nowNs),
		Elapsed: time.Duration(s.nowNs - s.statsFrom),
		Latency: s.verbHist.export(),
	}
	window := float64(r.Elapsed)
	for _, n := range s.allNodes() {
		if !n.sharesNIC {
			r.NICs = append(r.NICs, nicReport(n, window))
		}
		if n.c == nil {
			continue
		}
		cs := &n.c.cpu
		var jobs uint64
		for _, ck := range cs.cores {
			jobs += ck.jobs
		}
		for k, ck := range cs.cores {
			cr := CoreReport{Node: n.id, Core: k, Jobs: ck.jobs, Busy: time.Duration(ck.busy), MaxWait: time.Duration(cs.maxWait)}
			if jobs > 0 {
				cr.MeanWait = time.Duration(cs.queued / int64(jobs))
			}
			if window > 0 {
				cr.Utilisation = float64(ck.busy) / window
			}
			r.Cores = append(r.Cores, cr)
		}
	}
	r.Stats = s.clients.Released().Sub(s.baseClosed)
	for _, c := range s.clients.Clients() {
		st := c.ctr.Snapshot().Sub(c.base)
		r.Stats = r.Stats.Add(st)
		cr := ClientReport{ID: c.info.ID, Node: c.info.Node, Handler: c.handler, Stats: st,
			Answers: c.lat.n, MaxLatency: time.Duration(c.lat.max)}
		if c.lat.n > 0 {
			cr.MeanLatency = time.Duration(c.lat.sum / int64(c.lat.n))
		}
		r.Clients = append(r.Clients, cr)
	}
	return r
}

// NIC returns the report of node id's NIC, or false.
func (r *Report) NIC(id farmem.NodeID) (NICReport, bool) {
	for _, n := range r.NICs {
		if n.Node == id {
			return n, true
		}
	}
	return NICReport{}, false
}

// WriteText writes a human-readable summary: window, totals, busy NICs and cores.
func (r *Report) WriteText(w io.Writer) error {
	var err error
	pf := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, args...)
		}
	}
	pf("model %q, window %v\n", r.Model, r.Elapsed)
	pf("stats: %v\n", r.Stats)
	if r.Latency != nil && r.Latency.TotalCount() > 0 {
		pf("round trips: %d, mean %v, p50 %v, p99 %v, max %v\n", r.Latency.TotalCount(),
			time.Duration(r.Latency.Mean()), time.Duration(r.Latency.ValueAtQuantile(50)),
			time.Duration(r.Latency.ValueAtQuantile(99)), time.Duration(r.Latency.Max()))
	}
	for _, n := range r.NICs {
		if n.Served() == 0 && n.Issued == 0 {
			continue
		}
		pf("nic %v: served %d (read %d write %d cas %d faa %d mcas %d msg %d), issued %d, util %.3f, wait mean %v max %v\n",
			n.Node, n.Served(), n.Ops[farmem.OpRead], n.Ops[farmem.OpWrite], n.Ops[farmem.OpCAS], n.Ops[farmem.OpFAA],
			n.Ops[farmem.OpMaskedCAS], n.Messages, n.Issued, n.Utilisation, n.MeanWait, n.MaxWait)
	}
	for _, c := range r.Cores {
		if c.Jobs == 0 {
			continue
		}
		pf("core %v/%d: jobs %d, util %.3f, wait mean %v\n", c.Node, c.Core, c.Jobs, c.Utilisation, c.MeanWait)
	}
	return err
}

// nicReport reports node n's NIC over a window of the given nanoseconds.
func nicReport(n *node, window float64) NICReport {
	st := n.nic
	nr := NICReport{
		Node: n.id, Ops: st.ops, Messages: st.sends, Issued: st.issued, Bytes: st.bytes,
		Busy: time.Duration(st.busy), MaxWait: time.Duration(st.maxWait), Wait: st.hist.export(),
	}
	_ = nr.Wait.RecordValues(0, int64(st.noWait))
	if served := nr.Served(); served > 0 {
		nr.MeanWait = time.Duration(st.queued / int64(served))
	}
	if window > 0 {
		nr.Utilisation = float64(st.busy) / (window * float64(len(st.units)))
	}
	return nr
}
