#!/bin/sh
# Starts a farmem cluster's memory nodes on this machine: one farmemd per "memory" line of
# DIR/cluster.txt (copied from docs/cluster.example if DIR has none), with the secret DIR/secret
# (made with `farmemd secret` if missing). Each node logs to DIR/nID.log; its pid is in DIR/nID.pid.
#
#   docs/start-cluster.sh [DIR [ID...]]     DIR defaults to ./farmem-cluster; IDs start only those
#   kill $(cat DIR/n*.pid)                  stop them all (SIGTERM: each exits cleanly)
#
# farmemd is taken from $FARMEMD, else from PATH (go build -o bin/ ./cmd/... puts it in bin/).
set -eu
dir=${1:-farmem-cluster}
[ $# -gt 0 ] && shift
farmemd=${FARMEMD:-farmemd}
mkdir -p "$dir"
if [ ! -f "$dir/cluster.txt" ]; then
	cp "$(dirname "$0")/cluster.example" "$dir/cluster.txt"
fi
if [ ! -f "$dir/secret" ]; then
	(umask 077 && "$farmemd" secret >"$dir/secret")
fi
awk '$1 == "memory" { size = "256MiB"; for (i = 4; i <= NF; i++) if ($i ~ /^size=/) size = substr($i, 6); print $2, $3, size }' "$dir/cluster.txt" |
while read -r id addr size; do
	if [ $# -gt 0 ]; then
		want=no
		for w in "$@"; do [ "$w" = "$id" ] && want=yes; done
		[ $want = yes ] || continue
	fi
	"$farmemd" --id "$id" --listen "$addr" --size "$size" --secret-file "$dir/secret" >"$dir/n$id.log" 2>&1 &
	echo $! >"$dir/n$id.pid"
	echo "started memory node $id on $addr ($size), pid $!, log $dir/n$id.log"
done
