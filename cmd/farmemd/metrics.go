package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/farmem/farmem/rdma"
)

// nodeCollector exports a memory node's counters to Prometheus. It reads one snapshot of the
// node per scrape (rdma.Server.Metrics), so a scrape costs a few dozen atomic loads and nothing
// on the data path.
type nodeCollector struct {
	srv *rdma.Server

	conns, refused, closed, acceptErrs, batches, batchesRefused, verbs, verbBytes, netBytes,
	writing, buffered, bufferKept, bufferLimit, bufferWaits, region *prometheus.Desc
}

func newNodeCollector(srv *rdma.Server) *nodeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("farmemd_"+name, help, labels, nil)
	}
	return &nodeCollector{
		srv:            srv,
		conns:          d("connections", "Open connections by state: authenticated, or still in the handshake.", "state"),
		refused:        d("connections_refused_total", "Connections turned away or closed before they authenticated, by reason.", "reason"),
		closed:         d("connections_closed_total", "Authenticated connections the node closed, by reason: a protocol violation, replies not read within the write timeout, a large request not arriving within it.", "reason"),
		acceptErrs:     d("accept_errors_total", "Failed accepts the node recovered from (out of file descriptors or buffers)."),
		batches:        d("batches_total", "Batch frames received."),
		batchesRefused: d("batches_refused_total", "Batch frames refused whole, by reason: an op out of range, misaligned or with a stale key (bad_op), or results over the frame limit (reply_too_large).", "reason"),
		verbs:          d("verbs_total", "Verbs applied, by kind.", "kind"),
		verbBytes:      d("verb_bytes_total", "Data bytes of the verbs applied, by kind (8 per atomic).", "kind"),
		netBytes:       d("network_bytes_total", "Traffic of authenticated connections, by direction.", "direction"),
		writing:        d("output_queued_bytes", "Reply bytes being written to clients that have not yet taken them."),
		buffered:       d("buffer_bytes", "Bytes of the node-wide buffer budgets in use: large request payloads (input) and large replies (output).", "budget"),
		bufferKept:     d("buffer_kept_bytes", "Bytes of idle buffers each budget keeps for reuse, charged to it (at most a quarter of it).", "budget"),
		bufferLimit:    d("buffer_limit_bytes", "The size of each node-wide buffer budget."),
		bufferWaits:    d("buffer_waits_total", "Times a connection waited for a buffer budget, reading nothing from its client meanwhile.", "budget"),
		region:         d("region_bytes", "Size of the region the node serves."),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.refused, c.closed, c.acceptErrs, c.batches, c.batchesRefused,
		c.verbs, c.verbBytes, c.netBytes, c.writing, c.buffered, c.bufferKept, c.bufferLimit, c.bufferWaits, c.region} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.srv.Metrics()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.conns, float64(m.ConnsAuthenticated), "authenticated")
	gauge(c.conns, float64(m.ConnsHandshaking), "handshaking")
	for r, n := range m.Refused {
		counter(c.refused, n, r)
	}
	counter(c.closed, m.Violations, "violation")
	counter(c.closed, m.WriteTimeouts, "write_timeout")
	counter(c.closed, m.FrameTimeouts, "frame_timeout")
	counter(c.acceptErrs, m.AcceptErrors)
	counter(c.batches, m.Batches)
	for r, n := range m.BatchesRefused {
		counter(c.batchesRefused, n, r)
	}
	for k, n := range m.Ops {
		counter(c.verbs, n, k)
	}
	for k, n := range m.OpBytes {
		counter(c.verbBytes, n, k)
	}
	counter(c.netBytes, m.BytesIn, "in")
	counter(c.netBytes, m.BytesOut, "out")
	gauge(c.writing, float64(m.OutputWriting))
	gauge(c.buffered, float64(m.InputBuffered), "input")
	gauge(c.buffered, float64(m.OutputBuffered), "output")
	gauge(c.bufferKept, float64(m.InputKept), "input")
	gauge(c.bufferKept, float64(m.OutputKept), "output")
	gauge(c.bufferLimit, float64(m.BufferLimit))
	counter(c.bufferWaits, m.InputWaits, "input")
	counter(c.bufferWaits, m.OutputWaits, "output")
	gauge(c.region, float64(m.RegionBytes))
}

// serveMetrics serves the node's counters, the process's (resident memory, descriptors, CPU)
// and the Go runtime's in the Prometheus text exposition format at /metrics on addr, until
// the returned stop is called. It returns the address bound.
func serveMetrics(addr string, srv *rdma.Server, log *slog.Logger) (string, func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newNodeCollector(srv),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogAdapter{log}}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "err", err)
		}
	}()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}
	return ln.Addr().String(), stop, nil
}

// slogAdapter is promhttp's error log on the daemon's logger.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Println(v ...any) { a.log.Warn("metrics: " + fmt.Sprint(v...)) }
