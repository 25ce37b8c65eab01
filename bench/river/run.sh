#!/usr/bin/env bash
# Compares River's and ag's claim+complete throughput on one private PostgreSQL cluster (and
# then on SQLite), in one session, so that the figures can be compared. Usage:
#
#   bench/river/run.sh                      # 50,000 River jobs, 20,000 ag jobs
#   RIVER_JOBS=100000 AG_JOBS=50000 bench/river/run.sh
#   AG_BATCHES="128 1" AG_WORKERS=16 bench/river/run.sh
#
# Needs the PostgreSQL server binaries and psql on PATH; as root it runs the cluster as the
# postgres user (initdb refuses root). SQLITE=0 skips the SQLite half.
set -euo pipefail

RIVER_JOBS=${RIVER_JOBS:-50000}
RIVER_WORKERS=${RIVER_WORKERS:-100}
AG_JOBS=${AG_JOBS:-20000}
AG_WORKERS=${AG_WORKERS:-8}
AG_BATCHES=${AG_BATCHES:-128 32 1}
AG_PORT=${AG_PORT:-7791}
SQLITE=${SQLITE:-1}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# A short path: the cluster's unix socket lives here, and a socket path must fit in ~107 bytes.
tmp=$(mktemp -d /tmp/riverbench-XXXXXX)
# shellcheck source=cluster.sh
. "$here/cluster.sh"

echo "== builds"
(cd "$here" && go build -o "$tmp/riverbench" .)
(cd "$root" && go build -o "$tmp/ag" ./cmd/ag)
go version
# Other work on the machine skews every figure: say how busy it was.
if [ -r /proc/loadavg ]; then echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"; fi
echo "commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"

start_cluster
for db in river ag; do psql -q -h "$tmp" -U postgres -d postgres -c "CREATE DATABASE $db"; done

# ag_bench STORE runs ag serve on STORE and ag bench against it, with --batch 32 and 1 when
# this build of ag bench has --batch.
ag_bench() {
	start_ag "$1"
	for b in $AG_BATCHES; do
		"$tmp/ag" bench --server "$ag_url" --token "$ag_token" --jobs "$AG_JOBS" --workers "$AG_WORKERS" --batch "$b"
	done
	stop_ag
}

echo "== River on PostgreSQL"
"$tmp/riverbench" --database-url "$(pgurl river)" --jobs "$RIVER_JOBS" --workers "$RIVER_WORKERS"
echo "== ag on PostgreSQL"
ag_bench "$(pgurl ag)"

if [ "$SQLITE" = 1 ]; then
	echo "== River on SQLite"
	"$tmp/riverbench" --sqlite "$tmp/river.db" --jobs "$RIVER_JOBS" --workers "$RIVER_WORKERS"
	echo "== ag on SQLite"
	ag_bench "sqlite:$tmp/ag.db"
fi
