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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ag-worker", flag.ContinueOnError)
	server := fs.String("server", envOr("AG_SERVER", "http://127.0.0.1:7777"), "server URL (AG_SERVER)")
	token := fs.String("token", os.Getenv("AG_TOKEN"), "bearer token of a worker principal (AG_TOKEN)")
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
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
	if handlers[client.KindValidate] != nil {
		if err := os.MkdirAll(*cacheDir, 0o755); err != nil {
			return fmt.Errorf("--cache-dir: %w", err)
		}
		if fi, err := os.Stat(*workDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--work-dir %s: not a directory", *workDir)
		}
		// What a killed worker left there: its command's processes and its directory.
		if err := validator.ReapOrphans(ctx); err != nil {
			log.Warn("could not clean up after dead workers", "work_dir", *workDir, "err", err)
		}
	}

	if *keyPath == "" {
		*keyPath = filepath.Join("ag-data", "worker-"+strings.NewReplacer("/", "_", ":", "_").Replace(*label)+".key")
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
