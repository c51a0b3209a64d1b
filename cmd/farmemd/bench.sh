#!/usr/bin/env bash
# Loopback benchmark of farmemd beside redis-server, in one run: latency per verb (p50, p99,
# mean) and throughput with 1, 8 and 64 outstanding batches against as many pipelined GETs, each
# measured interleaved with its redis reference and repeated, with the ratios' median and range,
# the read and write system calls per op of each process, and the CPU time per op of each with
# 1, 8 and 64 outstanding. Installs redis-server from Debian when it is missing.
#
# It runs the comparison once per placement of the processes on the CPUs, since on loopback
# where they run decides more than either server does (each placement prints its own table):
#   one    the client (the test process, which drives both servers), farmemd and redis-server
#          all on one CPU: every wake-up is a switch on that CPU, and what is left is each
#          side's software and the kernel's loopback path, the servers' own costs;
#   split  the client on one CPU, both servers on another: every round trip wakes the other
#          CPU twice, which on a virtual machine whose idle CPUs halt is the host's wake-up of
#          a halted virtual CPU;
#   free   no placement: the kernel's scheduler puts the processes where it likes, each round
#          trip one of the two above or in between, so the ratios are a mixture that moves from
#          run to run.
#
#   cmd/farmemd/bench.sh    # FARMEM_BENCH_REPS=5 repetitions of FARMEM_BENCH_OPS=10000 ops per latency row
#   FARMEM_BENCH_PLACE=free cmd/farmemd/bench.sh    # one placement (or a list: "one split")
#
# one and split need taskset (util-linux) and, split, two CPUs; a placement that cannot be made
# is reported and skipped. FARMEM_SPIN=50us in the environment (farmemd inherits it) lets both
# sides' readers spin briefly before they park in lone exchanges (rdma.SetSpin; off by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null 2>&1; then
	echo "bench.sh: installing redis-server" >&2
	apt-get update -qq
	apt-get install -y -qq redis-server >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/farmemd.test" ./cmd/farmemd

# The CPUs this shell may run on, expanded from its Cpus_allowed_list ("0-1,4").
cpus=()
for part in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' ' '); do
	if [[ $part == *-* ]]; then
		for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cpus+=("$c"); done
	else
		cpus+=("$part")
	fi
done

run() {
	(cd cmd/farmemd && FARMEM_BENCH=1 "$@" "$tmp/farmemd.test" -test.count=1 -test.run '^TestLoopbackBench$' -test.v) |
		grep -v -e '^=== RUN' -e 'level='
}

for place in ${FARMEM_BENCH_PLACE:-one split free}; do
	echo "== placement: $place"
	case $place in
	one | split)
		if ! command -v taskset >/dev/null 2>&1; then
			echo "bench.sh: no taskset: placement $place skipped"
			continue
		fi
		server=${cpus[0]}
		if [[ $place == split ]]; then
			if ((${#cpus[@]} < 2)); then
				echo "bench.sh: one CPU: placement split skipped"
				continue
			fi
			server=${cpus[1]}
		fi
		run env FARMEM_BENCH_SERVER_CPUS="$server" taskset -c "${cpus[0]}"
		;;
	free) run env ;;
	*)
		echo "bench.sh: placement $place: want one, split or free" >&2
		exit 2
		;;
	esac
done
