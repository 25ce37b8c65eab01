#!/usr/bin/env bash
# Measures River and ag the way each measures itself, in one session on one private PostgreSQL
# cluster: River with its own `river bench --num-total-jobs N` (built from a River checkout),
# ag with `ag bench` against a fresh `ag serve`. Every run gets a new database (and ag a new
# server), the configurations are alternated round by round, and the medians and their ratio to
# River's are printed. Usage:
#
#   RIVER_SRC=~/src/river bench/river/compare.sh     # a checkout of github.com/riverqueue/river
#   JOBS=50000 ROUNDS=5 AG_BATCHES="128 1" RIVER_SRC=... bench/river/compare.sh
#
# RIVER_SRC's cmd/river is built at RIVER_REF (default v0.43.0, the version measured in
# docs/benchmarks.md) with GOWORK=off, so that its dependencies are the published ones. Needs
# the PostgreSQL server binaries and psql on PATH; as root it runs the cluster as the postgres
# user (initdb refuses root).
set -euo pipefail

JOBS=${JOBS:-20000}
ROUNDS=${ROUNDS:-3}
AG_BATCHES=${AG_BATCHES:-128 1}
AG_WORKERS=${AG_WORKERS:-8}
AG_PORT=${AG_PORT:-7792}
RIVER_REF=${RIVER_REF:-v0.43.0}
: "${RIVER_SRC:?set RIVER_SRC to a checkout of github.com/riverqueue/river}"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d /tmp/rivercmp-XXXXXX)
# shellcheck source=cluster.sh
. "$here/cluster.sh"

echo "== builds"
mkdir -p "$tmp/river-src"
git -C "$RIVER_SRC" archive "$RIVER_REF" | tar -x -C "$tmp/river-src"
(cd "$tmp/river-src/cmd/river" && GOWORK=off GOFLAGS=-mod=mod go build -o "$tmp/river" .)
(cd "$root" && go build -o "$tmp/ag" ./cmd/ag)
echo "river $RIVER_REF ($(git -C "$RIVER_SRC" rev-parse --short "$RIVER_REF^{commit}")), $(go version)"
echo "ag commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
if [ -r /proc/loadavg ]; then echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"; fi

start_cluster
fresh() {
	PGOPTIONS="-c client_min_messages=warning" \
	psql -q -h "$tmp" -U postgres -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
}

# river_drain answers River's own figure: river bench's "overall job/sec" for JOBS jobs
# inserted before its client starts, on a new database.
river_drain() {
	fresh river_run
	"$tmp/river" migrate-up --database-url "$(pgurl river_run)" >/dev/null
	"$tmp/river" bench --database-url "$(pgurl river_run)" --num-total-jobs "$JOBS" 2>&1 |
		sed -n 's/.*overall job\/sec \[ *\([0-9.]*\) *\].*/\1/p' | tail -1
}

# ag_drain BATCH answers ag's: ag bench's claim+complete jobs/s for JOBS jobs, enqueued first,
# with BATCH jobs a call, against a new ag serve on a new database.
ag_drain() {
	local out
	fresh ag_run
	start_ag "$(pgurl ag_run)"
	out=$("$tmp/ag" bench --server "$ag_url" --token "$ag_token" --jobs "$JOBS" --workers "$AG_WORKERS" --batch "$1" --latency-jobs 0)
	stop_ag
	echo "$out" | sed -n 's/^claim+complete:.*: \([0-9.]*\) jobs\/s.*/\1/p'
}

configs=("river bench" )
for b in $AG_BATCHES; do configs+=("ag bench --batch $b"); done
declare -A results
echo "== $ROUNDS rounds of $JOBS jobs, the configurations alternated"
for r in $(seq "$ROUNDS"); do
	for c in "${configs[@]}"; do
		if [ "$c" = "river bench" ]; then v=$(river_drain); else v=$(ag_drain "${c##* }"); fi
		[ -n "$v" ] || { echo "round $r, $c: no figure in its output" >&2; exit 1; }
		results[$c]="${results[$c]:-} $v"
		printf 'round %d  %-20s %10.0f jobs/s\n' "$r" "$c" "$v"
	done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
river=$(echo "${results[river bench]}" | median)
echo
echo "| run | rounds (jobs/s) | median | against River |"
echo "| --- | --- | --- | --- |"
for c in "${configs[@]}"; do
	m=$(echo "${results[$c]}" | median)
	printf '| `%s` | %s | **%.0f** | %.2f× |\n' "$c" "$(echo "${results[$c]}" | awk '{for (i=1;i<=NF;i++) printf "%s%.0f", (i>1?", ":""), $i}')" "$m" "$(awk "BEGIN {print $m / $river}")"
done
