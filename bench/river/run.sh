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
server=
as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
cleanup() {
	if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
	if [ -f "$tmp/data/postmaster.pid" ]; then
		# immediate: the data is thrown away, so a clean shutdown is wasted time.
		(cd "$tmp" && as_pg pg_ctl stop -m immediate -w -D "$tmp/data" >/dev/null) || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "== builds"
(cd "$here" && go build -o "$tmp/riverbench" .)
(cd "$root" && go build -o "$tmp/ag" ./cmd/ag)
go version
# Other work on the machine skews every figure: say how busy it was.
if [ -r /proc/loadavg ]; then echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"; fi
echo "commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"

echo "== PostgreSQL cluster in $tmp"
if [ "$(id -u)" = 0 ]; then chown postgres: "$tmp"; fi
(cd "$tmp" && as_pg initdb -D "$tmp/data" -A trust -U postgres -E UTF8 --locale=C --no-sync --no-instructions >/dev/null)
# The settings of ag's test cluster (internal/testutil/pgtest): no durability, since the
# cluster is thrown away; both queues pay the same.
(cd "$tmp" && as_pg pg_ctl start -w -t 60 -D "$tmp/data" -l "$tmp/pg.log" -o \
	"-c listen_addresses='' -k $tmp -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" >/dev/null)
postgres --version
for db in river ag; do psql -q -h "$tmp" -U postgres -d postgres -c "CREATE DATABASE $db"; done
pgurl() { echo "postgres://postgres@/$1?host=$tmp&sslmode=disable"; }

# ag_bench STORE runs ag serve on STORE and ag bench against it, with --batch 32 and 1 when
# this build of ag bench has --batch.
ag_bench() {
	local dir token=agt_riverbench$RANDOM$RANDOM url=http://127.0.0.1:$AG_PORT
	dir=$(mktemp -d "$tmp/ag-XXXXXX")
	(cd "$dir" && exec env AG_BOOTSTRAP_TOKEN=$token "$tmp/ag" serve --db "$1" --addr "127.0.0.1:$AG_PORT" \
		--audit-key "$dir/audit.key" --log-level warn) &
	server=$!
	for _ in $(seq 100); do
		"$tmp/ag" whoami --server "$url" --token "$token" >/dev/null 2>&1 && break
		sleep 0.1
	done
	for b in $AG_BATCHES; do
		"$tmp/ag" bench --server "$url" --token "$token" --jobs "$AG_JOBS" --workers "$AG_WORKERS" --batch "$b"
	done
	kill "$server"
	wait "$server" || true
	server=
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
