// Command checkout measures `ag repo import`, `ag checkout` and `ag status` (no edits) on
// generated repositories of small files, against a real `ag serve`, with the ag binary it is
// given, so that two builds can be compared in one session; and, beside them, `git clone` of
// the same repository from ag's git endpoint and from `git http-backend` serving a bare copy
// of it from disk (through Go's CGI handler), the peer ag's clone is compared with. It prints a
// Markdown table of medians. Figures, not a test: nothing here passes or fails on a time.
//
//	go build -o /tmp/ag ./cmd/ag && go run ./bench/checkout --ag /tmp/ag
//	go run ./bench/checkout --ag /tmp/ag --sizes 1000,10000 --runs 5 --db postgres://...
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ag-coord/ag/bench/internal/agserve"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "checkout bench:", err)
		os.Exit(1)
	}
}

type options struct {
	ag     string
	sizes  []int
	runs   int
	db     string // "" = a new SQLite database per size
	port   int
	perDir int
}

func run() error {
	var o options
	var sizes string
	flag.StringVar(&o.ag, "ag", "", "the ag binary to measure (required)")
	flag.StringVar(&sizes, "sizes", "1000,10000,50000", "repository sizes in files, comma-separated")
	flag.IntVar(&o.runs, "runs", 3, "checkouts and statuses timed per size (the median is printed)")
	flag.StringVar(&o.db, "db", "", "a PostgreSQL URL to serve from (emptied by no one: use a new database); default a new SQLite file per size")
	flag.IntVar(&o.port, "port", 7793, "the port ag serve listens on")
	flag.IntVar(&o.perDir, "per-dir", 100, "files per directory")
	flag.Parse()
	if o.ag == "" {
		return errors.New("--ag: name the ag binary to measure")
	}
	for s := range strings.SplitSeq(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("--sizes: %q is not a number of files", s)
		}
		o.sizes = append(o.sizes, n)
	}
	tmp, err := os.MkdirTemp("", "ag-checkout-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	fmt.Printf("ag: %s\n", agserve.Version(o.ag))
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average before: %s", b)
	}
	fmt.Println()
	fmt.Println("| files | import | checkout (median) | git clone from ag (median) | git clone from git http-backend (median) | status, first after checkout | status, no edits (median) | git status in the clone (median) | status with ag watch (median) |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range o.sizes {
		db := o.db
		if db == "" {
			db = "sqlite:" + filepath.Join(tmp, fmt.Sprintf("ag-%d.db", n))
		}
		// With --db, one PostgreSQL database serves every size, each its own repository.
		row, err := measure(o, tmp, db, n)
		if err != nil {
			return fmt.Errorf("%d files: %w", n, err)
		}
		fmt.Println(row)
	}
	return nil
}

// measure serves db, loads a repository of n files and times the commands.
func measure(o options, tmp, db string, n int) (string, error) {
	dir := filepath.Join(tmp, fmt.Sprintf("n%d", n))
	all := filepath.Join(dir, "src")
	if err := generate(all, n, o.perDir, 0, n); err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := agserve.Start(ctx, o.ag, db, dir, o.port)
	if err != nil {
		return "", err
	}
	defer srv.Stop()
	ag := srv.AG
	url, token := srv.URL, srv.Token
	repo := fmt.Sprintf("bench%d", n)

	importCell := ""
	took, err := ag("repo", "import", repo, all)
	if err != nil {
		// A build that cannot import so many files at once: load the repository in parts of
		// 10,000 files, each part its own top-level directories, and say so.
		fmt.Fprintf(os.Stderr, "one import of %d files failed; importing in parts: %v\n", n, firstLine(err))
		importCell = "fails"
		const part = 10000
		for lo := 0; lo < n; lo += part {
			pdir := filepath.Join(dir, fmt.Sprintf("part%d", lo/part))
			if err := generate(pdir, n, o.perDir, lo, min(n, lo+part)); err != nil {
				return "", err
			}
			if _, err := ag("repo", "import", repo, pdir); err != nil {
				return "", err
			}
		}
	} else {
		importCell = agserve.Seconds(took)
	}

	var checkouts []time.Duration
	var last string
	for i := range o.runs {
		last = filepath.Join(dir, fmt.Sprintf("co%d", i))
		took, err := ag("checkout", repo, last)
		if err != nil {
			return "", err
		}
		checkouts = append(checkouts, took)
	}
	fromAG, fromBackend, err := measureClones(o, dir, url, token, repo)
	if err != nil {
		return "", err
	}
	// Past the index's racy window (2 s at most), so that the first status may trust what the
	// checkout recorded.
	time.Sleep(2500 * time.Millisecond)
	first, err := ag("-C", last, "status")
	if err != nil {
		return "", err
	}
	// `git status` in a clone of the same files, alternated with ag's, for what the machine
	// allows: both stat every file.
	clone := filepath.Join(dir, "clone-ag0")
	gitStatus := func() (time.Duration, error) {
		if _, err := os.Stat(clone); err != nil {
			return 0, nil
		}
		cmd := exec.Command("git", "-C", clone, "status")
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("git status: %w\n%s", err, out)
		}
		return time.Since(start), nil
	}
	if _, err := gitStatus(); err != nil { // the first refreshes the clone's index
		return "", err
	}
	var statuses, gitStatuses []time.Duration
	for range max(o.runs, 9) {
		took, err := ag("-C", last, "status")
		if err != nil {
			return "", err
		}
		statuses = append(statuses, took)
		if took, err = gitStatus(); err != nil {
			return "", err
		}
		gitStatuses = append(gitStatuses, took)
	}
	gitCell := "n/a"
	if _, err := os.Stat(clone); err == nil {
		gitCell = agserve.Seconds(median(gitStatuses))
	}
	watchCell, err := watchedStatus(ag, last, max(o.runs, 9))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s | %s | %s |", n, importCell, agserve.Seconds(median(checkouts)), fromAG, fromBackend,
		agserve.Seconds(first), agserve.Seconds(median(statuses)), gitCell, watchCell), nil
}

// watchedStatus times `ag status` in the checkout co with `ag watch` running, after one status
// that records the watcher's token; "n/a" for a build or a system without it.
func watchedStatus(ag func(...string) (time.Duration, error), co string, runs int) (string, error) {
	if _, err := ag("-C", co, "watch", "--background"); err != nil {
		fmt.Fprintf(os.Stderr, "no ag watch here: %v\n", firstLine(err))
		return "n/a", nil
	}
	defer ag("-C", co, "watch", "--stop")
	if _, err := ag("-C", co, "status"); err != nil {
		return "", err
	}
	var took []time.Duration
	for range runs {
		d, err := ag("-C", co, "status")
		if err != nil {
			return "", err
		}
		took = append(took, d)
	}
	return agserve.Seconds(median(took)), nil
}

// measureClones times `git clone` of repo from ag's git endpoint, then, from a bare copy of
// what it cloned, from `git http-backend` on a local port: the same objects, served by git's
// own server. A build without a git endpoint answers "n/a" for both.
func measureClones(o options, dir, url, token, repo string) (fromAG, fromBackend string, err error) {
	gitTimed := func(args ...string) (time.Duration, error) {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		if err != nil {
			return 0, fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
		return time.Since(start), nil
	}
	auth := "http.extraHeader=Authorization: Bearer " + token
	remote := url + "/git/" + repo + ".git"
	bare := filepath.Join(dir, "bare", repo+".git")
	if _, err := gitTimed("-c", auth, "clone", "-q", "--bare", remote, bare); err != nil {
		fmt.Fprintf(os.Stderr, "no git clone from this build: %v\n", firstLine(err))
		return "n/a", "n/a", nil
	}
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", "", err
	}
	backend := httptest.NewServer(&cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(bare), "GIT_HTTP_EXPORT_ALL=1"},
	})
	defer backend.Close()
	var agClones, backendClones []time.Duration
	for i := range o.runs {
		// Alternated, so that both meet the machine in the same state.
		took, err := gitTimed("-c", auth, "clone", "-q", remote, filepath.Join(dir, fmt.Sprintf("clone-ag%d", i)))
		if err != nil {
			return "", "", err
		}
		agClones = append(agClones, took)
		took, err = gitTimed("clone", "-q", backend.URL+"/"+repo+".git", filepath.Join(dir, fmt.Sprintf("clone-backend%d", i)))
		if err != nil {
			return "", "", err
		}
		backendClones = append(backendClones, took)
	}
	return agserve.Seconds(median(agClones)), agserve.Seconds(median(backendClones)), nil
}

// generate writes the files lo..hi-1 of a repository of n files, perDir per directory, under
// dir; each is a few lines of text, different from every other.
func generate(dir string, n, perDir, lo, hi int) error {
	width := len(strconv.Itoa(max(n/perDir, 1)))
	for i := lo; i < hi; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%0*d", width, i/perDir))
		if i%perDir == 0 || i == lo {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		content := fmt.Sprintf("package d%d\n\n// File %d of %d.\nconst F%d = %d\n", i/perDir, i, n, i, i*7919)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.go", i)), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
