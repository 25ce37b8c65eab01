# Sourced by compare.sh: a private PostgreSQL cluster in $tmp (which the caller
# creates, short: the cluster's unix socket lives there, and a socket path must fit in ~107
# bytes), thrown away with it on exit, and the ag serve the caller started as $server stopped.

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

# start_cluster starts the cluster with the settings of ag's test cluster
# (internal/testutil/pgtest): no durability, since it is thrown away; both queues pay the same.
start_cluster() {
	echo "== PostgreSQL cluster in $tmp"
	if [ "$(id -u)" = 0 ]; then chown postgres: "$tmp"; fi
	(cd "$tmp" && as_pg initdb -D "$tmp/data" -A trust -U postgres -E UTF8 --locale=C --no-sync --no-instructions >/dev/null)
	(cd "$tmp" && as_pg pg_ctl start -w -t 60 -D "$tmp/data" -l "$tmp/pg.log" -o \
		"-c listen_addresses='' -k $tmp -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" >/dev/null)
	postgres --version
}

pgurl() { echo "postgres://postgres@/$1?host=$tmp&sslmode=disable"; }

# start_ag STORE starts $tmp/ag serve on STORE at 127.0.0.1:$AG_PORT with a new token, and waits
# until it answers; ag_url and ag_token say how to reach it, ag_dir is its working directory.
# stop_ag stops it.
start_ag() {
	local dir
	dir=$(mktemp -d "$tmp/ag-XXXXXX")
	ag_token=agt_riverbench$RANDOM$RANDOM ag_url=http://127.0.0.1:$AG_PORT ag_dir=$dir
	(cd "$dir" && exec env AG_BOOTSTRAP_TOKEN=$ag_token "$tmp/ag" serve --db "$1" --addr "127.0.0.1:$AG_PORT" \
		--audit-key "$dir/audit.key" --log-level warn) &
	server=$!
	for _ in $(seq 100); do
		"$tmp/ag" whoami --server "$ag_url" --token "$ag_token" >/dev/null 2>&1 && return
		sleep 0.1
	done
}
stop_ag() {
	kill "$server"
	wait "$server" || true
	server=
}
