package serveconfig

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// DefaultDB is the store of `ag serve` without --db or AG_DB.
const DefaultDB = "sqlite:./ag-data/ag.db"

// DefaultAuditKey is the audit key of `ag serve` on PostgreSQL without --audit-key or
// AG_AUDIT_KEY.
const DefaultAuditKey = "ag-data/audit.key"

// AuditKeyFor answers the audit key of `ag serve --db db` without --audit-key or AG_AUDIT_KEY:
// on SQLite audit.key beside the database file, which the key belongs with, so that two servers
// of two files have two keys; on PostgreSQL, whose replicas need one key whatever their working
// directory, DefaultAuditKey.
func AuditKeyFor(db string) string {
	return besideSQLite(db, "audit.key", DefaultAuditKey)
}

// besideSQLite answers the path of name in the directory of the SQLite database db, or
// otherwise when db is no SQLite database.
func besideSQLite(db, name, otherwise string) string {
	if path, ok := strings.CutPrefix(db, "sqlite:"); ok {
		if path = strings.TrimPrefix(path, "//"); path != "" {
			return filepath.Join(filepath.Dir(filepath.Clean(path)), name)
		}
	}
	return otherwise
}

// DefaultPackCache is where ag serve keeps its cached packs (gitstore.PackCache) on PostgreSQL.
const DefaultPackCache = "ag-data/pack-cache"

// PackCacheFor answers the default pack cache directory of `ag serve --db db`: pack-cache
// beside a SQLite database, else DefaultPackCache.
func PackCacheFor(db string) string {
	return besideSQLite(db, "pack-cache", DefaultPackCache)
}

// Procs answers how many Go processors `ag serve --db db` runs with, given the runtime's
// default and the GOMAXPROCS variable. On SQLite one more than the default: the one writer
// makes many short calls into SQLite, each holding a processor that nothing else can use
// meanwhile, and the whole queue waits on the writer. On 2 cores, 3 processors made batched
// claim+complete about 19% faster with the audit log and 6% without it (docs/benchmarks.md).
// A GOMAXPROCS the operator set is kept as it is.
func Procs(db string, procs int, env string) int {
	if strings.HasPrefix(db, "sqlite:") && env == "" {
		return procs + 1
	}
	return procs
}

// NewLogger answers the logger of --log-level and --log-format, refusing a level or a format
// it does not know before anything starts, rather than logging in another way than asked.
func NewLogger(w *os.File, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// CheckListen refuses to serve addr in plaintext unless it is a loopback address or the
// operator said a proxy terminates TLS (insecure): tokens cross the network as bearers.
func CheckListen(addr string, tls, insecure bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); !tls && !insecure && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--addr %s is not a loopback address: serve it with --tls-cert/--tls-key, or pass --insecure-listen behind a proxy that terminates TLS", addr)
	}
	return nil
}

// ValidEmailDomain accepts a DNS name of letters, digits and hyphens in dot-separated labels:
// it goes into every commit's author line, which a '>' or a newline would break.
func ValidEmailDomain(d string) bool {
	if d == "" || len(d) > 253 {
		return false
	}
	for label := range strings.SplitSeq(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// RedactDSN hides a password in a database URL before it is logged or put in an error.
func RedactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			creds := dsn[i+3 : at]
			if c := strings.Index(creds, ":"); c >= 0 {
				return dsn[:i+3] + creds[:c] + ":***" + dsn[at:]
			}
		}
	}
	return dsn
}
