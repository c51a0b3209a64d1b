#!/usr/bin/env bash
# Loopback benchmark of farmemd beside redis-server, in one run: latency per verb (p50, p99,
# mean) and throughput with 1, 8 and 64 outstanding batches against as many pipelined GETs, each
# measured interleaved with its redis reference and repeated, with the ratios' median and range,
# the read and write system calls per op of each process, and the CPU time per op of each with
# 1, 8 and 64 outstanding. Installs redis-server from Debian when it is missing.
#
#   cmd/farmemd/bench.sh    # FARMEM_BENCH_REPS=5 repetitions of FARMEM_BENCH_OPS=10000 ops per latency row
#
# FARMEM_SPIN=50us in the environment (farmemd inherits it) lets both sides' readers spin
# briefly before they park in lone exchanges (rdma.SetSpin; off by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null 2>&1; then
	echo "bench.sh: installing redis-server" >&2
	apt-get update -qq
	apt-get install -y -qq redis-server >/dev/null
fi
FARMEM_BENCH=1 go test -count=1 -run '^TestLoopbackBench$' -v ./cmd/farmemd "$@" | grep -v -e '^=== RUN' -e 'level='
