// Command integrate measures one-file integrations on repositories of growing size, against a
// real `ag serve`, with the ag binary it is given: for each size a fresh server and database, a
// repository of that many generated small files (`ag repo import`), then one agent with the Go
// SDK leasing one file and integrating one-file edits in a row, each based on the revision the
// one before made: --runs timed runs of --integrations each. It prints a Markdown table: the
// import's time, integrations per second (the median run, and every run), how much the database
// grew per integration, and the server's CPU per integration. Figures, not a test: nothing here
// passes or fails on a time.
//
//	go build -o /tmp/ag ./cmd/ag && go run ./bench/integrate --ag /tmp/ag
//	go run ./bench/integrate --ag /tmp/ag --sizes 1000,10000,100000 --db postgres://...
//
// With --db, every size gets a new database on that URL's server (CREATE DATABASE, dropped
// afterwards unless --keep), so the role of the URL must be allowed to create databases.
//
// Database growth on SQLite is the size of ag.db and ag.db-wal together, before the timed
// integrations and after, each time once the server has been idle for a while (--idle) and
// after a wal_checkpoint(FULL) this program runs on its own connection, so that every commit is
// in ag.db. The table also shows the growth of ag.db alone, which is the data: the WAL file is
// reused, never shrunk, and while integrations follow one another it never starts over, so it
// grows by what each one writes (about 21 pages) up to the writer's own checkpoint at 10,000
// pages (about 41 MB): the sum measures the WAL's traffic, capped, more than the data. On
// PostgreSQL it is pg_database_size (relations only; the WAL is not counted).
//
// Server CPU is the user and system time of the ag serve process over the timed integrations
// (from /proc), divided by their number; PostgreSQL's own processes are not in it.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3" // the SQLite driver ag uses, for the checkpoint before a size is read

	"github.com/ag-coord/ag/bench/internal/agserve"
	"github.com/ag-coord/ag/bench/internal/pgdb"
	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "integrate bench:", err)
		os.Exit(1)
	}
}

type options struct {
	ag           string
	sizes        []int
	integrations int
	runs         int
	db           string // "" = a new SQLite file per size; else a PostgreSQL URL whose server gets a new database per size
	keep         bool
	analyze      bool
	port         int
	perDir       int
	nested       bool
	idle         time.Duration
	interleave   bool
	perf         string // a directory for `perf record` profiles of the server, or ""
}

func run() error {
	var o options
	var sizes string
	flag.StringVar(&o.ag, "ag", "", "the ag binary to measure (required)")
	flag.StringVar(&sizes, "sizes", "1000,10000,100000", "repository sizes in files, comma-separated")
	flag.IntVar(&o.integrations, "integrations", 200, "one-file integrations timed in a row, per run")
	flag.IntVar(&o.runs, "runs", 3, "timed runs per size, one after the other on the same server (the median rate is printed)")
	flag.StringVar(&o.db, "db", "", "a PostgreSQL URL: each size gets a new database on its server (CREATE DATABASE); default a new SQLite file per size")
	flag.BoolVar(&o.keep, "keep", false, "keep the PostgreSQL databases instead of dropping them after each size")
	flag.BoolVar(&o.analyze, "analyze", false, "with --db, ANALYZE the new database after the import (as autovacuum would, sooner or later), so that the timed integrations run on statistics of the full tables")
	flag.IntVar(&o.port, "port", 7794, "the port ag serve listens on")
	flag.IntVar(&o.perDir, "per-dir", 100, "files per directory")
	flag.BoolVar(&o.interleave, "interleave", false, "start every size's server first, then take the timed runs in turn, size after size (default: one size after the other)")
	flag.BoolVar(&o.nested, "nested", false, "put the directories of files --per-dir at a time into top-level directories (dNN/dNNNN/fN.go), so that no tree has more than --per-dir entries; default all at the top level (dNNNN/fN.go)")
	flag.StringVar(&o.perf, "perf", "", "record the server with perf record -g during the import and during the integrations, into this directory (import-N.data, integrate-N.data)")
	flag.DurationVar(&o.idle, "idle", 2*time.Second, "how long the server is left idle (audit seals, checkpoints) before the database is measured")
	flag.Parse()
	if o.ag == "" {
		return errors.New("--ag: name the ag binary to measure")
	}
	if o.integrations <= 0 || o.runs <= 0 {
		return errors.New("--integrations, --runs: at least 1")
	}
	for s := range strings.SplitSeq(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("--sizes: %q is not a number of files", s)
		}
		o.sizes = append(o.sizes, n)
	}
	if o.analyze && o.db == "" {
		return errors.New("--analyze: only with --db")
	}
	if o.db != "" && !strings.HasPrefix(o.db, "postgres://") && !strings.HasPrefix(o.db, "postgresql://") {
		return fmt.Errorf("--db: %q is not a postgres:// URL (SQLite is the default, a new file per size)", o.db)
	}
	tmp, err := os.MkdirTemp("", "ag-integrate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	store := "SQLite"
	if o.db != "" {
		store = "PostgreSQL"
	}
	if o.analyze {
		store += " (ANALYZE after the import)"
	}
	fmt.Printf("ag: %s\n", agserve.Version(o.ag))
	shape := "all directories at the top level"
	if o.nested {
		shape = fmt.Sprintf("directories grouped %d to a top-level directory", o.perDir)
	}
	fmt.Printf("store: %s; %d runs of %d one-file integrations in a row per size, with the Go SDK (IntegrateFiles); %d files per directory, %s\n",
		store, o.runs, o.integrations, o.perDir, shape)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average before: %s", b)
	}
	fmt.Println()
	if o.db == "" {
		fmt.Println("| files | import | integrations/s, median (runs) | growth per integrate (ag.db + wal) | ag.db alone | server CPU per integrate |")
		fmt.Println("| --- | --- | --- | --- | --- | --- |")
	} else {
		fmt.Println("| files | import | integrations/s, median (runs) | growth per integrate (pg_database_size) | server CPU per integrate |")
		fmt.Println("| --- | --- | --- | --- | --- |")
	}
	if o.interleave {
		// Every size's server up at once, and their runs taken in turn: a machine whose speed
		// drifts over minutes then weighs on every size alike, which the ratio of two sizes'
		// rates needs.
		var targets []*target
		defer func() {
			for _, t := range targets {
				t.close()
			}
		}()
		for i, n := range o.sizes {
			t, err := setUp(o, tmp, n, o.port+i)
			if err != nil {
				return fmt.Errorf("%d files: %w", n, err)
			}
			targets = append(targets, t)
		}
		for _, t := range targets {
			if err := t.begin(); err != nil {
				return fmt.Errorf("%d files: %w", t.n, err)
			}
		}
		for range o.runs {
			for _, t := range targets {
				if err := t.run(); err != nil {
					return fmt.Errorf("%d files: %w", t.n, err)
				}
			}
		}
		for _, t := range targets {
			row, err := t.end()
			if err != nil {
				return fmt.Errorf("%d files: %w", t.n, err)
			}
			fmt.Println(row)
		}
	} else {
		for i, n := range o.sizes {
			row, err := measure(o, tmp, n, o.port+i)
			if err != nil {
				return fmt.Errorf("%d files: %w", n, err)
			}
			fmt.Println(row)
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("\nload average after: %s", b)
	}
	return nil
}

// measure serves a fresh database, imports a repository of n files and times the integrations.
func measure(o options, tmp string, n, port int) (string, error) {
	t, err := setUp(o, tmp, n, port)
	if err != nil {
		return "", err
	}
	defer t.close()
	if err := t.begin(); err != nil {
		return "", err
	}
	for range o.runs {
		if err := t.run(); err != nil {
			return "", err
		}
	}
	return t.end()
}

// target is one size's server, its repository imported and the agent's lease taken.
type target struct {
	o        options
	n        int
	srv      *agserve.Server
	cancel   context.CancelFunc
	cleanups []func()
	imported time.Duration
	size     func() (sizes, error)
	agent    *client.Client
	files    layout
	repo     string
	path     string
	base     string
	token    uint64
	done     int // integrations so far

	before    sizes
	cpuBefore time.Duration
	stopPerf  func()
	rates     []float64
}

// setUp serves a fresh database on port, imports a repository of n files and leases the file
// the agent edits.
func setUp(o options, tmp string, n, port int) (*target, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &target{o: o, n: n, cancel: cancel, files: layout{n: n, perDir: o.perDir, nested: o.nested}, repo: fmt.Sprintf("bench%d", n)}
	ok := false
	defer func() {
		if !ok {
			t.close()
		}
	}()
	dir := filepath.Join(tmp, fmt.Sprintf("n%d", n))
	src := filepath.Join(dir, "src")
	if err := t.files.generate(src); err != nil {
		return nil, err
	}

	var db string
	analyze := func() error { return nil }
	if o.db == "" {
		path := filepath.Join(dir, "ag.db")
		db = "sqlite:" + path
		t.size = func() (sizes, error) { return sqliteSize(ctx, path) }
	} else {
		name := fmt.Sprintf("ag_integrate_bench_%d_%d", n, time.Now().Unix())
		dbURL, drop, err := pgdb.Create(ctx, o.db, name)
		if err != nil {
			return nil, err
		}
		if !o.keep {
			t.cleanups = append(t.cleanups, drop)
		} else {
			fmt.Fprintf(os.Stderr, "%d files: database %s kept\n", n, name)
		}
		db = dbURL
		t.size = func() (sizes, error) { return postgresSize(ctx, o.db, name) }
		if o.analyze {
			analyze = func() error { return analyzeDatabase(ctx, dbURL) }
		}
	}

	srv, err := agserve.Start(ctx, o.ag, db, dir, port)
	if err != nil {
		return nil, err
	}
	t.srv = srv
	stopPerf, err := record(o.perf, srv.Cmd.Process.Pid, fmt.Sprintf("import-%d.data", n))
	if err != nil {
		return nil, err
	}
	t.imported, err = srv.AG("repo", "import", t.repo, src)
	stopPerf()
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(src); err != nil {
		return nil, err
	}
	if err := analyze(); err != nil {
		return nil, err
	}

	admin := client.New(srv.URL, srv.Token, client.WithTimeout(5*time.Minute))
	p, err := admin.Admin.CreatePrincipal(ctx, &agwpv1.CreatePrincipalRequest{Name: "agent", Role: agwpv1.Role_ROLE_AGENT})
	if err != nil {
		return nil, fmt.Errorf("create the agent: %w", err)
	}
	t.agent = client.New(srv.URL, p.GetToken(), client.WithTimeout(5*time.Minute))
	r, err := t.agent.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: t.repo})
	if err != nil {
		return nil, err
	}
	t.base = r.GetRepository().GetMainline()
	// The file the agent edits: one in the middle of the repository.
	t.path = t.files.path(n / 2)
	lease, err := t.agent.AcquireLease(ctx, client.AcquireLeaseOptions{Repository: t.repo, Paths: []string{t.path}, Holder: benchHolder, TTL: 2 * time.Hour})
	if err != nil {
		return nil, err
	}
	t.token = lease.GetFencingToken()
	ok = true
	return t, nil
}

const benchHolder = "bench"

// begin takes the sizes and CPU time the timed runs are measured from.
func (t *target) begin() error {
	time.Sleep(t.o.idle)
	var err error
	if t.before, err = t.size(); err != nil {
		return err
	}
	if t.cpuBefore, err = processCPU(t.srv.Cmd.Process.Pid); err != nil {
		return err
	}
	t.stopPerf, err = record(t.o.perf, t.srv.Cmd.Process.Pid, fmt.Sprintf("integrate-%d.data", t.n))
	return err
}

// run times one run of o.integrations one-file integrations in a row.
func (t *target) run() error {
	ctx := context.Background()
	start := time.Now()
	for range t.o.integrations {
		t.done++
		content := fmt.Appendf(nil, "%s// Edit %d.\n", t.files.content(t.n/2), t.done)
		ch, err := t.agent.IntegrateFiles(ctx, client.IntegrateOptions{
			Repository: t.repo, BaseRevision: t.base, Holder: benchHolder, FencingTokens: []uint64{t.token},
			Message: fmt.Sprintf("edit %d", t.done), Changes: []client.FileChange{{Path: t.path, Content: content}},
		})
		if err != nil {
			return fmt.Errorf("integration %d: %w", t.done, err)
		}
		if ch.GetState() != agwpv1.ChangeState_CHANGE_STATE_INTEGRATED {
			return fmt.Errorf("integration %d: change %s is %s, not integrated", t.done, ch.GetId(), ch.GetState())
		}
		// The next edit is based on the revision this one made.
		t.base = ch.GetIntegratedRevision()
	}
	t.rates = append(t.rates, float64(t.o.integrations)/time.Since(start).Seconds())
	return nil
}

// end answers the size's row of the table.
func (t *target) end() (string, error) {
	t.stopPerf()
	cpuAfter, err := processCPU(t.srv.Cmd.Process.Pid)
	if err != nil {
		return "", err
	}
	time.Sleep(t.o.idle)
	after, err := t.size()
	if err != nil {
		return "", err
	}
	k := int64(t.done)
	cpu := (cpuAfter - t.cpuBefore) / time.Duration(k)
	if t.o.db == "" {
		return fmt.Sprintf("| %d | %s | %s | %s | %s | %s |", t.n, agserve.Seconds(t.imported), rateCell(t.rates),
			kb((after.total-t.before.total)/k), kb((after.main-t.before.main)/k), millis(cpu)), nil
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s |", t.n, agserve.Seconds(t.imported), rateCell(t.rates), kb((after.total-t.before.total)/k), millis(cpu)), nil
}

// close stops the server and drops what setUp made.
func (t *target) close() {
	if t.srv != nil {
		t.srv.Stop()
	}
	for _, f := range t.cleanups {
		f()
	}
	t.cancel()
}

// record starts `perf record -g` on the process pid into dir/name, and answers a function that
// stops it and waits for its file; with no dir it records nothing.
func record(dir string, pid int, name string) (func(), error) {
	if dir == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command("perf", "record", "-g", "-F", "999", "-p", strconv.Itoa(pid), "-o", filepath.Join(dir, name))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	time.Sleep(500 * time.Millisecond) // perf attaches
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		// perf exits with an error status on the interrupt that ends its recording.
		if err := cmd.Wait(); err != nil {
			if _, serr := os.Stat(filepath.Join(dir, name)); serr != nil {
				fmt.Fprintf(os.Stderr, "perf record %s: %v\n%s", name, err, out.String())
			}
		}
	}, nil
}

// sizes is a database's size in bytes: total counts everything measured, main the SQLite
// database file without its WAL (on PostgreSQL the same as total).
type sizes struct {
	total, main int64
}

// sqliteSize checkpoints the WAL into the database file (FULL: every frame, waiting for the
// server's writer and readers; the WAL file keeps its size) and answers the sizes of ag.db and
// ag.db-wal.
func sqliteSize(ctx context.Context, path string) (sizes, error) {
	db, err := sql.Open("sqlite3", (&url.URL{Scheme: "file", Path: path}).String()+"?_busy_timeout=10000")
	if err != nil {
		return sizes{}, err
	}
	defer db.Close()
	var busy, frames, copied int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(FULL)`).Scan(&busy, &frames, &copied); err != nil {
		return sizes{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if busy != 0 || copied != frames {
		fmt.Fprintf(os.Stderr, "checkpoint of %s incomplete (busy %d, %d of %d frames): ag.db alone misses what is left in the WAL\n", path, busy, copied, frames)
	}
	var s sizes
	for _, name := range []string{path, path + "-wal"} {
		fi, err := os.Stat(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return sizes{}, err
		}
		s.total += fi.Size()
		if name == path {
			s.main = fi.Size()
		}
	}
	return s, nil
}

// analyzeDatabase runs ANALYZE on the database of dbURL.
func analyzeDatabase(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", pgdb.Redact(dbURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// postgresSize answers pg_database_size of the database name on the server of pgURL.
func postgresSize(ctx context.Context, pgURL, name string) (sizes, error) {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return sizes{}, fmt.Errorf("connect to %s: %w", pgdb.Redact(pgURL), err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT pg_database_size($1)`, name).Scan(&n); err != nil {
		return sizes{}, fmt.Errorf("pg_database_size(%s): %w", name, err)
	}
	return sizes{total: n, main: n}, nil
}

// processCPU answers the processor time (user and system) the process pid has used, from
// /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields start after its last ')'.
	_, rest, ok := bytes.Cut(b, []byte(") "))
	fields := strings.Fields(string(rest))
	if !ok || len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	// utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name; in clock
	// ticks, 100 per second on Linux.
	var ticks int64
	for _, f := range fields[11:13] {
		t, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// layout names and fills the files of a generated repository: n files, perDir to a directory,
// each a few lines of text different from every other (as bench/checkout's). The directories
// are all at the top level, or with nested, perDir of them to a top-level directory.
type layout struct {
	n, perDir int
	nested    bool
}

// path answers the path of file i.
func (l layout) path(i int) string {
	dirs := max(l.n/l.perDir, 1)
	d := i / l.perDir
	name := fmt.Sprintf("d%0*d/f%d.go", len(strconv.Itoa(dirs)), d, i)
	if l.nested {
		tops := max(dirs/l.perDir, 1)
		name = fmt.Sprintf("d%0*d/%s", len(strconv.Itoa(tops)), d/l.perDir, name)
	}
	return name
}

func (l layout) content(i int) string {
	return fmt.Sprintf("package d%d\n\n// File %d of %d.\nconst F%d = %d\n", i/l.perDir, i, l.n, i, i*7919)
}

// generate writes the repository's files under dir.
func (l layout) generate(dir string) error {
	for i := range l.n {
		name := filepath.Join(dir, filepath.FromSlash(l.path(i)))
		if i%l.perDir == 0 {
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(name, []byte(l.content(i)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// rateCell answers the median of rates, and each rate in the order of the runs.
func rateCell(rates []float64) string {
	sorted := slices.Clone(rates)
	slices.Sort(sorted)
	each := make([]string, len(rates))
	for i, r := range rates {
		each[i] = fmt.Sprintf("%.0f", r)
	}
	if len(rates) == 1 {
		return each[0]
	}
	return fmt.Sprintf("%.0f (%s)", sorted[len(sorted)/2], strings.Join(each, " / "))
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

func kb(b int64) string {
	if b >= 1<<20 {
		return fmt.Sprintf("%.2f MB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f KB", float64(b)/(1<<10))
}

// version names the binary and the commit it was built from, as its build information says.
