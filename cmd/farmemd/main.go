// Command farmemd is a farmem memory node: it owns a region of memory and serves one-sided verbs
// on it to compute processes that prove the cluster secret, with no application logic.
//
//	farmemd --id 1 --size 1GiB --secret-file /etc/farmem/secret [--listen 127.0.0.1:7070]
//	        [--backing anon|shm:NAME|file:PATH|devdax:/dev/daxX.Y] [--provider tcp|ibverbs]
//	        [--device NAME[:PORT[:GID-INDEX]]]
//	        [--addr-file PATH] [--log-format text|json] [--log-level info]
//	        [--max-conns N] [--max-outstanding N] [--max-unauth N] [--max-buffer SIZE]
//	        [--handshake-timeout 2s] [--write-timeout 10s] [--metrics ADDR] [--allow-faults]
//	farmemd status --addr HOST:PORT --secret-file PATH [--timeout 2s]
//	farmemd secret > secret          a fresh cluster secret (32 random bytes, hex)
//
// It listens on loopback unless --listen names another address; with port 0 it picks a free
// port, logs it, and writes it to --addr-file if given. It logs in structured form (log/slog)
// to standard error. SIGTERM or SIGINT shut it down cleanly: it stops accepting, closes its
// connections, unmaps its memory (removing a shm backing) and exits 0.
//
// --provider ibverbs (a build with -tags rdma, on Linux with cgo and rdma-core's libibverbs)
// registers the region with an RDMA NIC — --device, else the variable rdma.DeviceEnv names, else the first
// device's port 1 — which then serves compute processes' verbs by itself; the node keeps its
// TCP listener for the handshake, health, membership and queue-pair setup. A binary built
// without the tag refuses it and says so.
//
// # Bounds
//
// The node's memory is bounded whatever its clients send. Beyond the region, it holds:
//
//   - per authenticated connection (at most --max-conns, default 4096): at most 144 KiB of
//     buffers (a 32 KiB read buffer, a 32 KiB frame buffer, and up to 80 KiB of small replies,
//     written whenever 32 KiB queue up);
//   - per connection still in its handshake (at most --max-unauth, default 256): a few KiB;
//   - per node, two shared budgets of --max-buffer bytes each (default 64MiB, at least one
//     largest frame, 17 MiB): request payloads over 32 KiB, and replies over 32 KiB (the
//     buffers a budget keeps idle for reuse count against it too, up to a quarter of it).
//
// So a node's buffers stay under 4096×144 KiB + 256×8 KiB + 2×64 MiB, about 710 MiB at the
// defaults, and about 2×64 MiB + 144 KiB for any one client, however it behaves. farmemd makes
// that figure plus 32 MiB (the runtime and the node's tables) the Go collector's soft memory
// limit, unless a lower one is set, so that large buffers given back do not let the heap grow
// to twice what is live: the node's resident memory stays within its region's touched pages
// plus that limit (which the collector may pass by the allocation in progress, at most one
// largest frame). A batch whose
// results would exceed the frame limit the node announces (17 MiB) is refused per op with
// "the batch's results exceed the node's frame limit" before any reply is built; clients split
// their batches so this never happens to them. A client that sends without reading its replies
// meets backpressure: the node writes its replies, stops reading its requests when the socket
// is full, and closes it after --write-timeout. A connection that waits for a budget reads
// nothing from its client meanwhile.
//
// # Admission
//
// Connections in their handshake have their own budget (--max-unauth) and deadline
// (--handshake-timeout), apart from the authenticated limit (--max-conns). When the budget is
// full, a new connection pushes out the oldest one that has not sent a hello (else the oldest),
// so a flood of silent or garbage connections never refuses a client that holds the secret.
// Running out of file descriptors pauses accepting, never stops it. Log lines a stranger can
// cause (refusals, violations) are rate-limited per kind, at most 5 per 10 s, and the next line
// written reports how many were suppressed.
//
// # Clocks and late requests
//
// Every batch a client sends carries an expiry, the client's wall-clock post time plus its down
// timeout, after which the client reports it failed. The node checks it against its own wall
// clock before applying anything of the batch and refuses an expired one whole (logged as
// "refused a batch that arrived after its expiry", counted in the expired batches): a node
// that was stopped (SIGSTOP, a debugger, a swap storm) and resumes never applies the requests
// its clients already saw fail. This assumes the node's clock and its clients' differ by at
// most a small skew S (run NTP or PTP); no request a client saw fail is then applied later than
// its expiry plus S. A clock far ahead makes the node refuse requests as expired; one far behind
// stretches the bound by its lag. The check needs the node's CPU, so it is not made on the
// --provider ibverbs data path. Clients and nodes of other protocol versions refuse each other
// at the handshake.
//
// # Metrics
//
// --metrics ADDR (e.g. 127.0.0.1:9100; port 0 picks one, logged as "serving metrics") serves
// the node's counters at http://ADDR/metrics in the Prometheus text exposition format:
// connections open by state and refused by reason, verbs and data bytes by kind, batches and
// batches refused by reason, reply bytes queued for clients, the buffer budgets in use, the
// region's size, and the process's resident memory, descriptors and Go runtime statistics.
// Without the flag nothing listens but the node's own port.
//
// --allow-faults lets authenticated clients inject faults (partition a client, crash after n
// ops) through a control request, so fault tests can drive a separate process; never use it in
// production.
//
// `farmemd status` asks a running node for its health and counters (the info RPC) and prints
// them as JSON; it exits 1 if the node is unreachable or refuses the secret.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sig))
}

// run is farmemd with its arguments, output streams and shutdown signals; it returns the exit
// code.
func run(args []string, stdout, stderr io.Writer, sig <-chan os.Signal) int {
	if len(args) > 0 && args[0] == "status" {
		return status(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "secret" {
		return printSecret(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("farmemd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on (host:port; port 0 picks a free one)")
	id := fs.Uint("id", 0, "this memory node's id, 1..32767 (required)")
	sizeFlag := fs.String("size", "", "region size, e.g. 64MiB or 1G (required; 0 with devdax: the whole device)")
	backing := fs.String("backing", "anon", "where the memory lives: anon, shm:NAME, file:PATH or devdax:/dev/daxX.Y")
	secretFile := fs.String("secret-file", "", "file holding the cluster secret, at least 16 bytes (required)")
	provider := fs.String("provider", "tcp", "data path: tcp, or ibverbs (an RDMA NIC; needs a build with -tags rdma)")
	device := fs.String("device", "", "the ibverbs provider's RDMA device, NAME[:PORT[:GID-INDEX]] (default $"+rdma.DeviceEnv+", else the first device, port 1)")
	addrFile := fs.String("addr-file", "", "write the bound address to this file once listening")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	maxConns := fs.Int("max-conns", 0, "most open connections (0: 4096)")
	maxOut := fs.Int("max-outstanding", 0, "most unanswered requests per connection (0: 1024)")
	maxUnauth := fs.Int("max-unauth", 0, "most connections in their handshake, apart from --max-conns (0: 256)")
	maxBufFlag := fs.String("max-buffer", "", "size of each node-wide budget for large requests and replies (default 64MiB)")
	handshakeTimeout := fs.Duration("handshake-timeout", 0, "close a connection that has not authenticated within this (0: 2s)")
	writeTimeout := fs.Duration("write-timeout", 0, "close a connection that does not take its replies within this (0: 10s)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100)")
	allowFaults := fs.Bool("allow-faults", false, "let authenticated clients inject faults (partition, crash after n ops): for tests only")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "farmemd:", err)
		return 2
	}
	fail := func(msg string, err error) int {
		log.Error(msg, "err", err)
		return 1
	}
	if fs.NArg() > 0 {
		return fail("bad arguments", fmt.Errorf("unexpected %q", fs.Args()))
	}
	if *id == 0 || *id > uint(farmem.MaxMemoryNode) {
		return fail("bad flags", fmt.Errorf("--id must be 1..%d", farmem.MaxMemoryNode))
	}
	if *sizeFlag == "" && !strings.HasPrefix(*backing, "devdax:") {
		return fail("bad flags", errors.New("--size is required: a byte count such as 64MiB"))
	}
	size, err := rdma.ParseSize(*sizeFlag)
	if err != nil && *sizeFlag != "" {
		return fail("bad flags", fmt.Errorf("--size: want a byte count such as 64MiB: %w", err))
	}
	if *secretFile == "" {
		return fail("bad flags", errors.New("--secret-file is required"))
	}
	var maxBuf uint64
	if *maxBufFlag != "" {
		if maxBuf, err = rdma.ParseSize(*maxBufFlag); err != nil || maxBuf > 1<<40 {
			return fail("bad flags", fmt.Errorf("--max-buffer %q: want a byte count such as 64MiB, at most 1TiB", *maxBufFlag))
		}
	}
	if *maxUnauth < 0 || *handshakeTimeout < 0 || *writeTimeout < 0 {
		return fail("bad flags", errors.New("--max-unauth, --handshake-timeout and --write-timeout must not be negative"))
	}
	secret, err := rdma.ReadSecret(*secretFile)
	if err != nil {
		return fail("cannot read the cluster secret", err)
	}
	if st, err := os.Stat(*secretFile); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("the secret file is readable by other users", "path", *secretFile, "mode", st.Mode().Perm().String())
	}
	srv, err := rdma.NewServer(rdma.ServerOptions{
		Node: farmem.NodeID(*id), Size: size, Backing: *backing, Secret: secret, Provider: *provider, Device: *device,
		Logger: log, MaxConns: *maxConns, MaxOutstanding: *maxOut, AllowFaults: *allowFaults,
		MaxUnauth: *maxUnauth, MaxBuffer: int64(maxBuf), HandshakeTimeout: *handshakeTimeout, WriteTimeout: *writeTimeout,
	})
	if err != nil {
		return fail("cannot start", err)
	}
	conns, unauth := *maxConns, *maxUnauth
	if conns == 0 {
		conns = 4096
	}
	if unauth == 0 {
		unauth = 256
	}
	memLimit := limitMemory(memoryLimit(conns, unauth, srv.Metrics().BufferLimit))
	log.Debug("go memory limit", "bytes", memLimit)
	addr, err := srv.Listen(*listen)
	if err != nil {
		_ = srv.Close()
		return fail("cannot listen", err)
	}
	stopMetrics := func() {}
	if *metricsAddr != "" {
		maddr, stop, err := serveMetrics(*metricsAddr, srv, log)
		if err != nil {
			_ = srv.Close()
			return fail("cannot serve metrics", err)
		}
		stopMetrics = stop
		log.Info("serving metrics", "addr", maddr, "path", "/metrics")
	}
	if *addrFile != "" {
		if err := writeFileAtomic(*addrFile, addr+"\n"); err != nil {
			stopMetrics()
			_ = srv.Close()
			return fail("cannot write the address file", err)
		}
	}
	s := <-sig
	log.Info("shutting down", "signal", s.String())
	stopMetrics()
	if err := srv.Close(); err != nil {
		return fail("shutdown", err)
	}
	return 0
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// writeFileAtomic writes data to path through a temporary file and a rename, so a reader never
// sees it half written.
func writeFileAtomic(path, data string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".farmemd-addr-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func status(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("farmemd status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "the node's address (host:port)")
	secretFile := fs.String("secret-file", "", "file holding the cluster secret")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: farmemd status --addr HOST:PORT --secret-file PATH [--timeout 2s]\n\nAsks a running memory node for its health and counters and prints them as JSON; exits 1 if\nthe node is unreachable or refuses the secret. `farmem status --cluster FILE` shows every node.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *addr == "" || *secretFile == "" {
		fmt.Fprintln(stderr, "farmemd status: --addr and --secret-file are required")
		return 2
	}
	secret, err := rdma.ReadSecret(*secretFile)
	if err != nil {
		fmt.Fprintln(stderr, "farmemd status:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := rdma.QueryStatus(ctx, *addr, secret, *timeout)
	if err != nil {
		fmt.Fprintln(stderr, "farmemd status:", err)
		return 1
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(st)
	return 0
}
