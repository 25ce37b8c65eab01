#!/usr/bin/env bash
# Measures River and ag the way each measures itself, in one session on one machine: River with
# its own `river bench --num-total-jobs N`, built from River's repository; ag with `ag bench`
# against a fresh `ag serve`, and with a fleet of `ag-worker` processes. Each run gets a new
# database (and ag a new server), the configurations alternate round by round, and the medians
# and their ratio to River's drain on the same store are printed. Usage:
#
#   bench/river/compare.sh                               # clones River at RIVER_REF
#   RIVER_SRC=~/src/river bench/river/compare.sh         # or uses a checkout of it
#   JOBS=50000 ROUNDS=5 STORES=postgres bench/river/compare.sh
#
# Settings: JOBS (20000), ROUNDS (3), STORES ("postgres sqlite"), AG_BATCHES ("128 1": one
# `ag bench --batch B` configuration each), AG_WORKERS (8: ag bench's workers), AG_FLEET (4:
# ag-worker processes; 0 skips the fleet), AG_FLEET_CONCURRENCY (64), AG_PORT (7792),
# RIVER_REF (v0.43.0). RIVER_SRC's cmd/river is built at RIVER_REF with GOWORK=off, so that its
# dependencies are the ones River's release names. Needs Go, git, the PostgreSQL server
# binaries and psql on PATH; as root it runs the cluster as the postgres user (initdb refuses
# root).
set -euo pipefail

JOBS=${JOBS:-20000}
ROUNDS=${ROUNDS:-3}
STORES=${STORES:-postgres sqlite}
AG_BATCHES=${AG_BATCHES:-128 1}
AG_WORKERS=${AG_WORKERS:-8}
AG_FLEET=${AG_FLEET:-4}
AG_FLEET_CONCURRENCY=${AG_FLEET_CONCURRENCY:-64}
AG_PORT=${AG_PORT:-7792}
RIVER_REF=${RIVER_REF:-v0.43.0}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# A short path: the cluster's unix socket lives here, and a socket path must fit in ~107 bytes.
tmp=$(mktemp -d /tmp/rivercmp-XXXXXX)
# shellcheck source=cluster.sh
. "$here/cluster.sh"

echo "== builds"
if [ -z "${RIVER_SRC:-}" ]; then
	RIVER_SRC=$tmp/river-repo
	git clone -q --branch "$RIVER_REF" https://github.com/riverqueue/river "$RIVER_SRC"
fi
mkdir -p "$tmp/river-src"
git -C "$RIVER_SRC" archive "$RIVER_REF" | tar -x -C "$tmp/river-src"
(cd "$tmp/river-src/cmd/river" && GOWORK=off GOFLAGS=-mod=mod go build -o "$tmp/river" .)
(cd "$root" && go build -o "$tmp/ag" ./cmd/ag && go build -o "$tmp/ag-worker" ./cmd/ag-worker)
echo "river $RIVER_REF ($(git -C "$RIVER_SRC" rev-parse --short "$RIVER_REF^{commit}")), $(go version)"
echo "ag commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
# Other work on the machine skews every figure: say how busy it was.
if [ -r /proc/loadavg ]; then echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"; fi

case " $STORES " in *" postgres "*) start_cluster ;; esac

# fresh NAME answers the URL of a new, empty database NAME on STORE, for River's CLI or ag.
fresh() {
	local who=$1 name=$2
	if [ "$store" = postgres ]; then
		PGOPTIONS="-c client_min_messages=warning" \
			psql -q -h "$tmp" -U postgres -d postgres -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
		pgurl "$name"
	else
		rm -rf "${tmp:?}/$name" && mkdir -p "$tmp/$name"
		if [ "$who" = river ]; then echo "sqlite://$tmp/$name/river.db"; else echo "sqlite:$tmp/$name/ag.db"; fi
	fi
}

# river_drain answers River's own figure: river bench's "overall job/sec" for JOBS jobs
# inserted before its client starts, on a new database.
river_drain() {
	local url
	url=$(fresh river river_run)
	"$tmp/river" migrate-up --database-url "$url" >/dev/null
	"$tmp/river" bench --database-url "$url" --num-total-jobs "$JOBS" 2>&1 |
		sed -n 's/.*overall job\/sec \[ *\([0-9.]*\) *\].*/\1/p' | tail -1
}

# ag_drain BATCH answers ag's: ag bench's claim+complete jobs/s for JOBS jobs, enqueued and
# sealed first, with BATCH jobs a call, against a new ag serve on a new database.
ag_drain() {
	local out
	start_ag "$(fresh ag ag_run)"
	out=$("$tmp/ag" bench --server "$ag_url" --token "$ag_token" --jobs "$JOBS" --workers "$AG_WORKERS" --batch "$1" --latency-jobs 0)
	stop_ag
	echo "$out" | sed -n 's/^claim+complete:.*: \([0-9.]*\) jobs\/s.*/\1/p'
}

# fleet_drain answers the drain of JOBS ag.noop jobs by AG_FLEET ag-worker processes of
# AG_FLEET_CONCURRENCY slots, started once the jobs are queued and sealed, as ag bench
# --workers 0 times it, against a new ag serve on a new database.
fleet_drain() {
	local out=$tmp/fleet.out workers=() i
	start_ag "$(fresh ag ag_run)"
	"$tmp/ag" bench --server "$ag_url" --token "$ag_token" --jobs "$JOBS" --workers 0 --kind ag.noop --latency-jobs 0 >"$out" &
	local bench=$!
	until grep -q '^ready:' "$out"; do
		kill -0 "$bench" 2>/dev/null || { wait "$bench"; return 1; }
		sleep 0.02
	done
	for i in $(seq "$AG_FLEET"); do
		(cd "$ag_dir" && exec env AG_TOKEN="$ag_token" "$tmp/ag-worker" --server "$ag_url" --label "fleet-$i" \
			--kinds ag.noop --concurrency "$AG_FLEET_CONCURRENCY" --log-level warn) &
		workers+=($!)
	done
	wait "$bench"
	kill "${workers[@]}" 2>/dev/null || true
	wait "${workers[@]}" 2>/dev/null || true
	stop_ag
	sed -n 's/^claim+complete:.*: \([0-9.]*\) jobs\/s.*/\1/p' "$out"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for store in $STORES; do
	configs=("river bench")
	for b in $AG_BATCHES; do configs+=("ag bench --batch $b"); done
	if [ "$AG_FLEET" -gt 0 ]; then configs+=("ag-worker ×$AG_FLEET --concurrency $AG_FLEET_CONCURRENCY"); fi
	declare -A results=()
	echo "== $store: $ROUNDS rounds of $JOBS jobs, the configurations alternated"
	for r in $(seq "$ROUNDS"); do
		for c in "${configs[@]}"; do
			case $c in
			"river bench") v=$(river_drain) ;;
			"ag bench"*) v=$(ag_drain "${c##* }") ;;
			ag-worker*) v=$(fleet_drain) ;;
			esac
			[ -n "$v" ] || { echo "round $r, $c: no figure in its output" >&2; exit 1; }
			results[$c]="${results[$c]:-} $v"
			printf 'round %d  %-34s %10.0f jobs/s\n' "$r" "$c" "$v"
		done
	done
	river=$(echo "${results[river bench]}" | median)
	echo
	echo "| $store, $JOBS jobs | rounds (jobs/s) | median | against River |"
	echo "| --- | --- | --- | --- |"
	for c in "${configs[@]}"; do
		m=$(echo "${results[$c]}" | median)
		printf '| `%s` | %s | **%.0f** | %.2f× |\n' "$c" "$(echo "${results[$c]}" | awk '{for (i=1;i<=NF;i++) printf "%s%.0f", (i>1?", ":""), $i}')" "$m" "$(awk "BEGIN {print $m / $river}")"
	done
	echo
	unset results
done
