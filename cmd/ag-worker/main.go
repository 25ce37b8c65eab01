// Command ag-worker is the execution-plane worker: it claims jobs from an ag server, runs them,
// and reports their outcome with the claim number of every claim (ADR-0012).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ag-coord/ag/client"
	"github.com/ag-coord/ag/internal/attest"
	"github.com/ag-coord/ag/internal/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ag-worker:", err)
		os.Exit(1)
	}
}

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

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ag-worker", flag.ContinueOnError)
	server := fs.String("server", envOr("AG_SERVER", "http://127.0.0.1:7777"), "server URL (AG_SERVER)")
	// Not the flag's default, which -help would print.
	token := fs.String("token", "", "bearer token of a worker principal (default $AG_TOKEN)")
	label := fs.String("label", os.Getenv("AG_WORKER_LABEL"), "this worker's label, unique per running worker (AG_WORKER_LABEL)")
	kinds := fs.String("kinds", "ag.noop", "comma-separated job kinds to run: validate, ag.noop")
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
	network := fs.String("sandbox-network", "shared", "the network of validation commands: shared (the worker's) or none (a loopback of their own)")
	unsafe := fs.Bool("unsafe-no-sandbox", false, "run validation commands without a sandbox, with this worker's rights: they can read its token and key and sign any result. Only for code you trust")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
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
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("worker", *label)

	c := client.New(*server, *token, client.WithUserAgent("ag-worker"))
	validator := &worker.Validator{Client: c, CacheDir: *cacheDir, WorkDir: *workDir, Logger: log}
	handlers := map[string]worker.Handler{}
	for _, k := range strings.Split(*kinds, ",") {
		switch k = strings.TrimSpace(k); k {
		case "ag.noop":
			handlers[k] = worker.Noop
		case client.KindValidate:
			handlers[k] = validator.Handle
		case "":
		default:
			return fmt.Errorf("--kinds: this worker has no handler for %q (it runs: %s, ag.noop)", k, client.KindValidate)
		}
	}
	if len(handlers) == 0 {
		return errors.New("--kinds: name at least one kind")
	}
	if *network != "shared" && *network != "none" {
		return fmt.Errorf("--sandbox-network %q: use shared or none", *network)
	}
	if *keyPath == "" {
		*keyPath = filepath.Join("ag-data", "worker-"+strings.NewReplacer("/", "_", ":", "_").Replace(*label)+".key")
	}
	if handlers[client.KindValidate] != nil {
		if fi, err := os.Stat(*workDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--work-dir %s: not a directory", *workDir)
		}
		if *unsafe {
			validator.Unsandboxed = true
			log.Warn("UNSAFE: --unsafe-no-sandbox: validation commands run with this worker's rights; " +
				"the code under validation can read its token and key and sign any result")
		} else {
			sb, err := worker.NewSandbox(worker.SandboxConfig{
				Bwrap: *bwrap, ReadOnly: sandboxRO, NoNetwork: *network == "none", PATH: os.Getenv("PATH"),
				Hidden: []string{*keyPath, *cacheDir, *workDir, "ag-data"},
			})
			if err == nil {
				err = sb.SelfCheck(ctx, *workDir)
			}
			if err != nil {
				return fmt.Errorf("validate jobs run in a bubblewrap sandbox, and it does not work here: %w; "+
					"install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap) or pass --bwrap PATH "+
					"(--unsafe-no-sandbox runs them without one, with this worker's rights)", err)
			}
			validator.Sandbox = sb
			log.Info("validation commands run in a sandbox", "bwrap", sb.Bwrap(), "network", *network, "read_only", sandboxRO)
		}
		if err := os.MkdirAll(*cacheDir, 0o755); err != nil {
			return fmt.Errorf("--cache-dir: %w", err)
		}
		// What a killed worker left there: its command's processes and its directory.
		if err := validator.ReapOrphans(ctx); err != nil {
			log.Warn("could not clean up after dead workers", "work_dir", *workDir, "err", err)
		}
	}

	key, err := worker.LoadOrCreateKey(ctx, c, *keyPath)
	if err != nil {
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
	log.Info("ag-worker started", "server", *server, "kinds", *kinds, "concurrency", *concurrency)
	err = w.Run(ctx)
	log.Info("ag-worker stopped")
	return err
}
