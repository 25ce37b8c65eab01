// Command ag-worker is the execution-plane worker: it claims jobs from an ag server, runs them,
// and reports their outcome with the claim number of every claim (ADR-0012).
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/egress"
	"github.com/ag-coord/ag/internal/size"
	"github.com/ag-coord/ag/internal/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}

// exitCode answers the exit status of run's outcome: 0 for none and for -help (its usage was
// printed), 2 for a command line that does not parse (why was printed), 1 otherwise, which it
// prints to stderr.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(*usageError)):
		return 2
	}
	fmt.Fprintln(stderr, "ag-worker:", err)
	return 1
}

// usageError is a command line that does not parse, whose error and usage were printed.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// allKinds are the job kinds this worker has handlers for, and runs without --kinds.
var allKinds = []string{client.KindValidate, "ag.noop"}

const usageText = `ag-worker runs the jobs of an ag server. It claims the jobs of the kinds it runs, runs each
one while it heartbeats its claim, and reports the outcome with the claim's number
(docs/worker-protocol.md):

  validate  a repository's validation command, run on the candidate tree in a bubblewrap
            sandbox that cannot see this worker's token or key, with a signed attestation
            of the result (docs/validation.md)
  ag.noop   waits payload.ms milliseconds; for smoke tests and benchmarks

Without --kinds it runs both. When the sandbox does not work here (no bubblewrap, no user
namespaces) it then runs ag.noop only, and says so when it starts; with --kinds validate it
refuses to start instead. It waits for a server that does not answer, at start and later,
and stops on SIGTERM or Ctrl-C, finishing or handing back the jobs it holds.

Usage:
  AG_TOKEN=<a worker token> ag-worker [flags]

Example:
  ag principal create builder --role worker     # an admin; prints the worker's token
  sudo apt-get install bubblewrap               # the sandbox of validate jobs
  AG_TOKEN=agt_... ag-worker --label builder-1 --key ./builder-1.key

Flags:
`

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run is ag-worker with the command line args: it prints its usage to stdout when asked
// (answering flag.ErrHelp), and logs to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ag-worker", flag.ContinueOnError)
	fs.SetOutput(stderr) // where the flag package says what it refused
	fs.Usage = func() {} // printed below, to stdout when asked for and to stderr after an error
	usage := func(w io.Writer) {
		fmt.Fprint(w, usageText)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	server := fs.String("server", envOr("AG_SERVER", "http://127.0.0.1:7777"), "server URL (AG_SERVER)")
	// Not the flag's default, which -help would print.
	token := fs.String("token", "", "bearer token of a worker principal (default $AG_TOKEN)")
	label := fs.String("label", os.Getenv("AG_WORKER_LABEL"), "this worker's label, unique per running worker (AG_WORKER_LABEL)")
	kinds := fs.String("kinds", "", "comma-separated job kinds to run: validate, ag.noop (default: each of them that works here)")
	concurrency := fs.Int("concurrency", 1, "jobs run at once")
	keyPath := fs.String("key", "", "Ed25519 signing key (PEM); created and registered when missing, its public key written to FILE.pub (default ./ag-data/worker-LABEL.key)")
	cacheDir := fs.String("cache-dir", filepath.Join("ag-data", "blob-cache"), "blobs fetched for validate jobs, by digest; workers may share it")
	workDir := fs.String("work-dir", os.TempDir(), "where validate jobs check out their trees, each in a fresh directory removed afterwards")
	lease := fs.Duration("lease", 30*time.Second, "claim lease; heartbeats go every third of it")
	wait := fs.Duration("wait", 30*time.Second, "long-poll wait per claim")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "on SIGTERM, how long running jobs may finish before they are failed for a retry")
	logLevel := fs.String("log-level", envOr("AG_LOG_LEVEL", "info"), "debug, info, warn or error")
	bwrap := fs.String("bwrap", "bwrap", "the bubblewrap executable that sandboxes validation commands: a path, or a name looked up on PATH")
	var sandboxRO stringList
	fs.Var(&sandboxRO, "sandbox-ro", "a host `DIR` validation commands may also read, at the same path (a toolchain, a module cache); repeatable. Never a directory they may write")
	network := fs.String("sandbox-network", "none", "the network of validation commands: none (a loopback of their own, and the egress proxy when their policy asks for it) "+
		"or shared (this worker's own network, its loopback and every database and server it reaches included: only for code you trust)")
	var egressAllow stringList
	fs.Var(&egressAllow, "egress-allow", "`HOST,...` a validation whose policy asks for egress (ag repo set-validation --network egress) may reach through this worker's proxy: "+
		"host names (*.DOMAIN for its subdomains), ports 80 and 443 unless HOST:PORT; never loopback, private, link-local or this machine's addresses; repeatable")
	goSeed := fs.Bool("sandbox-go-seed", false, "at start, build the Go standard library in the sandbox (go build std) into a build cache of this worker's own under --cache-dir, and start each validation with a copy of it as its GOCACHE instead of an empty one")
	maxMemory, maxDisk := sizeFlag(worker.DefaultLimits.Memory), sizeFlag(worker.DefaultLimits.Disk)
	fs.Var(&maxMemory, "max-memory", "the memory each validation run may hold, its processes together: `SIZE` as 512MiB, 4GiB (0: no limit); "+
		"a run that reaches it is stopped and fails with \"worker limit: memory SIZE\"")
	maxPids := fs.Int64("max-pids", worker.DefaultLimits.Pids, "the processes (threads included) each validation run may have at once (0: no limit); "+
		"a run that reaches it is stopped and fails with \"worker limit: processes N\"")
	fs.Var(&maxDisk, "max-disk", "the disk each validation run may fill, its checkout, home, /tmp, /dev/shm and output together, in a file system of its own: `SIZE` (0: no limit); "+
		"a run that fills it is stopped and fails with \"worker limit: disk SIZE\"")
	unsafe := fs.Bool("unsafe-no-sandbox", false, "run validation commands without a sandbox, with this worker's rights: they can read its token and key and sign any result. Only for code you trust")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return err
		}
		usage(stderr)
		return &usageError{err}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s (ag-worker --help shows its flags)", strings.Join(fs.Args(), " "))
	}
	if *token == "" {
		*token = os.Getenv("AG_TOKEN")
	}
	if *token == "" {
		return errors.New("no token: pass --token or set AG_TOKEN (a worker principal's: ag principal create NAME --role worker)")
	}
	if *label == "" {
		host, _ := os.Hostname()
		*label = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", *logLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("worker", *label)

	c := client.New(*server, *token, client.WithUserAgent("ag-worker"))
	validator := &worker.Validator{Client: c, CacheDir: *cacheDir, WorkDir: *workDir, Logger: log}
	handlers := map[string]worker.Handler{}
	// Without --kinds, every kind this worker runs, but validate only when its sandbox works.
	explicit := *kinds != ""
	if !explicit {
		*kinds = strings.Join(allKinds, ",")
	}
	for _, k := range strings.Split(*kinds, ",") {
		switch k = strings.TrimSpace(k); k {
		case "ag.noop":
			handlers[k] = worker.Noop
		case client.KindValidate:
			handlers[k] = validator.Handle
		case "":
		default:
			return fmt.Errorf("--kinds: this worker has no handler for %q (it runs: %s)", k, strings.Join(allKinds, ", "))
		}
	}
	if len(handlers) == 0 {
		return errors.New("--kinds: name at least one kind")
	}
	limits := worker.Limits{Memory: int64(maxMemory), Pids: *maxPids, Disk: int64(maxDisk)}
	for _, l := range []struct {
		flag       string
		value, min int64
		show       func(int64) string
	}{
		{"--max-memory", limits.Memory, worker.MinLimits.Memory, size.Format},
		{"--max-pids", limits.Pids, worker.MinLimits.Pids, func(n int64) string { return fmt.Sprint(n) }},
		{"--max-disk", limits.Disk, worker.MinLimits.Disk, size.Format},
	} {
		if l.value < 0 || l.value > 0 && l.value < l.min {
			return fmt.Errorf("%s %s: give 0 for no limit, or at least %s", l.flag, l.show(l.value), l.show(l.min))
		}
	}
	if *network != "shared" && *network != "none" {
		return fmt.Errorf("--sandbox-network %q: use none (the default) or shared", *network)
	}
	egressRules, err := egress.ParseAllow(egressAllow)
	if err != nil {
		return fmt.Errorf("--egress-allow: %w", err)
	}
	labelFile := strings.NewReplacer("/", "_", ":", "_").Replace(*label)
	if *keyPath == "" {
		*keyPath = filepath.Join("ag-data", "worker-"+labelFile+".key")
	}
	// The seed is this worker's own (workers may share the cache directory), rebuilt at each
	// start: never one that a past run could have touched.
	seedDir := ""
	if *goSeed && !*unsafe {
		seedDir = filepath.Join(*cacheDir, "go-build-seed-"+labelFile)
	}
	if handlers[client.KindValidate] != nil {
		if fi, err := os.Stat(*workDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--work-dir %s: not a directory", *workDir)
		}
		if *unsafe {
			validator.Unsandboxed = true
			log.Warn("UNSAFE: --unsafe-no-sandbox: validation commands run with this worker's rights; " +
				"the code under validation can read its token and key and sign any result")
			if *goSeed {
				log.Warn("--sandbox-go-seed is ignored with --unsafe-no-sandbox: it seeds the sandbox's build cache")
			}
		} else {
			sb, err := worker.NewSandbox(worker.SandboxConfig{
				Bwrap: *bwrap, ReadOnly: sandboxRO, SharedNetwork: *network == "shared", PATH: os.Getenv("PATH"),
				Hidden: []string{*keyPath, *cacheDir, *workDir, "ag-data"}, GoSeed: seedDir,
			})
			if err == nil {
				err = sb.SelfCheck(ctx, *workDir)
			}
			switch {
			case err != nil && explicit:
				return fmt.Errorf("validate jobs run in a bubblewrap sandbox, and it does not work here: %w; "+
					"install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap) or pass --bwrap PATH "+
					"(--unsafe-no-sandbox runs them without one, with this worker's rights)", err)
			case err != nil:
				// Not asked for by name: the other kinds run, and the operator is told, at the
				// level of a problem, that this worker validates nothing.
				delete(handlers, client.KindValidate)
				log.Error("validate jobs are OFF on this worker: they run in a bubblewrap sandbox, and it does not work here; "+
					"install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap) or pass --bwrap PATH, then restart. "+
					"With --kinds validate this worker refuses to start without it",
					"err", err, "runs", strings.Join(kindsOf(handlers), ","))
			default:
				validator.Sandbox = sb
				log.Info("validation commands run in a sandbox", "bwrap", sb.Bwrap(), "network", *network, "read_only", sandboxRO)
				if *network == "shared" {
					log.Warn("--sandbox-network shared: validation commands run with this worker's own network; " +
						"the code under validation reaches the ag server, databases and every service on this machine's loopback " +
						"and whatever its network reaches; attestations say network \"shared\"")
				} else if validator.Egress, err = egress.New(egressRules, log); err != nil {
					return err
				} else if len(egressRules) > 0 {
					log.Info("validations whose policy asks for egress reach these hosts through this worker's proxy", "egress_allow", egressAllow.String())
				}
			}
		}
	}
	if handlers[client.KindValidate] != nil {
		if err := os.MkdirAll(*cacheDir, 0o755); err != nil {
			return fmt.Errorf("--cache-dir: %w", err)
		}
		if validator.Sandbox != nil {
			validator.Limits = worker.NewLimiter(limits, *workDir)
			logLimits(log, validator.Limits, *workDir, *concurrency, limits.Disk)
		} else {
			log.Warn("validation runs are held to no limit but their timeout: memory, processes and disk are limited in the sandbox only")
		}
		// What a killed worker left there: its command's processes, its directory, its
		// cgroups and the mount of its file system.
		if err := validator.ReapOrphans(ctx); err != nil {
			log.Warn("could not clean up after dead workers", "work_dir", *workDir, "err", err)
		}
		if sb := validator.Sandbox; sb != nil && seedDir != "" {
			log.Info("filling the Go build cache seed: go build std in the sandbox", "dir", seedDir)
			start := time.Now()
			if err := sb.FillGoSeed(ctx, *workDir); err != nil {
				log.Warn("--sandbox-go-seed: could not fill the Go build cache seed; validations start with an empty build cache",
					"err", err, "elapsed", time.Since(start).Round(time.Millisecond))
			} else {
				log.Info("filled the Go build cache seed; each validation starts with a copy of it",
					"dir", seedDir, "elapsed", time.Since(start).Round(time.Millisecond))
			}
		}
	}

	// The server may not be up yet (started together, restarting): wait for it.
	log.Info("registering this worker's key with the server", "server", *server, "key", *keyPath)
	var key ed25519.PrivateKey
	err = worker.WaitForServer(ctx, log.With("server", *server), "register this worker's key", func(ctx context.Context) error {
		var err error
		key, err = worker.LoadOrCreateKey(ctx, c, *keyPath)
		return err
	})
	switch {
	case ctx.Err() != nil:
		log.Info("ag-worker stopped before the server answered")
		return nil
	case client.IsCode(err, connect.CodeUnauthenticated):
		return fmt.Errorf("the server at %s does not accept this token: %w (use the token of a worker principal: ag principal create NAME --role worker)", *server, err)
	case client.IsCode(err, connect.CodePermissionDenied):
		return fmt.Errorf("the server at %s refuses this token: %w (its principal needs the role worker: ag principal create NAME --role worker)", *server, err)
	case client.IsCode(err, connect.CodeUnimplemented), client.IsCode(err, connect.CodeNotFound):
		return fmt.Errorf("%s does not answer as an ag server: %w (check --server or AG_SERVER)", *server, err)
	case err != nil:
		return err
	}
	validator.Signer = attest.NewSigner(key)
	w, err := worker.New(worker.Config{
		Client: c, Label: *label, Handlers: handlers, Concurrency: *concurrency,
		Lease: *lease, Wait: *wait, ShutdownGrace: *grace, Logger: log,
	})
	if err != nil {
		return err
	}
	log.Info("ag-worker started", "server", *server, "kinds", strings.Join(kindsOf(handlers), ","), "concurrency", *concurrency)
	err = w.Run(ctx)
	log.Info("ag-worker stopped")
	return err
}

// logLimits says which limits the worker holds its validation runs to, and, as a problem,
// which it cannot hold them to on this machine, and why.
func logLimits(log *slog.Logger, l *worker.Limiter, workDir string, concurrency int, disk int64) {
	for _, st := range l.Status() {
		switch {
		case st.Kept && st.Value == "":
			log.Info("validation runs are limited", "limit", st.Name, "how", st.How)
		case st.Kept:
			log.Info("validation runs are limited", "limit", st.Name, "value", st.Value, "how", st.How)
		case st.Off:
			log.Info("validation runs are not limited: turned off", "limit", st.Name)
		default:
			log.Warn("validation runs are NOT limited here: this worker cannot keep the limit on this machine",
				"limit", st.Name, "value", st.Value, "why", st.Why)
		}
	}
	// Each run's file system is a sparse file: it takes the work directory's disk as it is
	// written, up to its size.
	if free, err := worker.FreeBytes(workDir); err == nil && disk > 0 && free < int64(concurrency)*disk {
		log.Warn("the work directory has less free disk than --concurrency runs may write (--max-disk each): runs that write much may fill it",
			"work_dir", workDir, "free", size.Format(free/(1<<20)*(1<<20)), "max_disk", size.Format(disk), "concurrency", concurrency)
	}
}

// sizeFlag is a flag of a size in bytes, written as size.Parse reads it.
type sizeFlag int64

func (f *sizeFlag) String() string { return size.Format(int64(*f)) }

func (f *sizeFlag) Set(v string) error {
	n, err := size.Parse(v)
	if err != nil {
		return err
	}
	*f = sizeFlag(n)
	return nil
}

// kindsOf answers the kinds of handlers, sorted.
func kindsOf(handlers map[string]worker.Handler) []string {
	kinds := make([]string, 0, len(handlers))
	for k := range handlers {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}
