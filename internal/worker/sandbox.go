package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ag-coord/ag/internal/attest"
)

// A validation command is code an agent wrote: it may try anything the worker's rights allow,
// such as reading the worker's token or key and signing a pass for a failing tree. So it runs
// in a bubblewrap sandbox that is declared as the list of what it may see (read-only system
// directories, its checkout, a home, a /tmp and a /dev/shm of its own), in namespaces of its
// own (user, PID, IPC, UTS, cgroup and network), with no capabilities and none of the worker's
// environment. Its network is a loopback of its own, and the worker's egress proxy when its
// policy asks for a network (egress.go); the worker's own network only when the operator says
// so (--sandbox-network shared). Its PID namespace dies with its first process, so nothing it starts
// outlives the run; and with the worker, so nothing outlives a killed worker either.

// Where the run's own directories appear in the sandbox. The paths are fixed, so that the
// command's output (paths in compiler messages, in test names) is the same on every worker.
const (
	sandboxTree = "/ag/tree" // the checkout, read-write: the command's working directory
	sandboxHome = "/ag/home" // HOME, GOCACHE and GOPATH, read-write, private to the run
	sandboxTmp  = "/tmp"     // TMPDIR, read-write, private to the run
)

// defaultSandboxPATH is the command's PATH when none of the worker's directories is visible.
const defaultSandboxPATH = "/usr/local/bin:/usr/bin:/bin"

// systemDirs are shown read-only at their own path where they exist: the programs and
// libraries a command runs with. A merged-/usr system has the others as symbolic links into
// /usr, which the sandbox gets as the same links.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are what the sandbox sees of /etc: what programs need to run, resolve names and
// check certificates. Not the whole of /etc, which holds host secrets (ssh host keys,
// /etc/shadow) that a worker run as root would otherwise show its command.
var etcFiles = []string{
	"alternatives", "ca-certificates", "ca-certificates.conf", "debian_version", "gai.conf",
	"group", "host.conf", "hosts", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
	"mime.types", "networks", "nsswitch.conf", "os-release", "passwd", "pki/ca-trust",
	"pki/tls/certs", "protocols", "resolv.conf", "services", "ssl/certs", "ssl/openssl.cnf",
	"timezone",
}

// SandboxConfig says how validation commands are isolated.
type SandboxConfig struct {
	// Bwrap is the bubblewrap executable: a path, or a name looked up on PATH. Default "bwrap".
	Bwrap string
	// ReadOnly are more host directories the command may read, each at its own path: a
	// toolchain outside /usr, a module cache filled by the operator. Never a directory that
	// validations may write: what one run leaves there, a later run would read.
	ReadOnly []string
	// SharedNetwork gives the command the worker's own network, loopback included, whatever
	// its policy asks. Otherwise it has a network namespace of its own, with only a loopback
	// and, when its policy asks for egress, the worker's egress proxy.
	SharedNetwork bool
	// Hidden are paths the command must never see (the worker's key, its blob cache, its
	// work directory): a ReadOnly directory that is or holds one of them is refused.
	Hidden []string
	// PATH is the worker's PATH: the command's PATH keeps those of its directories that the
	// sandbox shows, so that it finds the tools the worker would.
	PATH string
	// GoSeed is a directory of this worker's own, which the sandbox must not show, where
	// FillGoSeed puts a Go build cache filled by `go build std` in the sandbox. Once it is
	// filled, each run starts with a copy of it as its GOCACHE. Empty: runs start with an
	// empty build cache.
	GoSeed string
}

// Sandbox runs validation commands under bubblewrap. Make one with NewSandbox.
type Sandbox struct {
	bwrap    string
	fixed    []string // the bwrap arguments every run shares, before the run's directories
	readOnly []string // the operator's read-only directories, after them
	visible  []string // the host directories the command sees at their own path
	path     string   // the command's PATH unless the policy sets one
	shared   bool     // SandboxConfig.SharedNetwork
	// forwarder is this program's executable, which a run with egress starts in its sandbox
	// to carry its loopback connections to the proxy (egress_linux.go).
	forwarder string
	// self is this program's executable, the Go preset's GOCACHEPROG in the sandbox.
	self string
	// goSeedDir is SandboxConfig.GoSeed, absolute; goSeed is the same once FillGoSeed has
	// filled it. Both are set before runs start, and not changed while they run.
	goSeedDir string
	goSeed    string
}

// NewSandbox checks cfg and answers its sandbox. It does not run anything: SelfCheck does.
func NewSandbox(cfg SandboxConfig) (*Sandbox, error) {
	if err := sandboxSupported(); err != nil {
		return nil, err
	}
	bwrap := cfg.Bwrap
	if bwrap == "" {
		bwrap = "bwrap"
	}
	found, err := exec.LookPath(bwrap)
	if err != nil {
		return nil, fmt.Errorf("bubblewrap (%s) not found: %w", bwrap, err)
	}
	if found, err = filepath.Abs(found); err != nil {
		return nil, err
	}
	sb := &Sandbox{bwrap: found}
	sb.fixed = []string{
		// Namespaces of its own: it sees none of the host's processes (and cannot signal
		// them), nor its IPC objects, and cannot rename the host.
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		// Run as root, bwrap would leave the command every capability in its user
		// namespace, enough to remount the read-only directories writable.
		"--cap-drop", "ALL",
		// Its PID namespace dies with bwrap, and bwrap with the worker.
		"--die-with-parent",
		// No TIOCSTI into a terminal the worker may have.
		"--new-session",
		// None of the worker's environment: it may hold AG_TOKEN and other secrets.
		"--clearenv",
		"--hostname", "ag-sandbox",
		"--proc", "/proc", "--dev", "/dev",
	}
	sb.shared = cfg.SharedNetwork
	if sb.self, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("the egress forwarder is this program, and its executable is not found: %w", err)
	}
	if !sb.shared {
		sb.forwarder = sb.self
	}
	usr := false
	for _, dir := range systemDirs {
		fi, err := os.Lstat(dir)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(dir)
			if err != nil {
				return nil, err
			}
			sb.fixed = append(sb.fixed, "--symlink", target, dir)
		case fi.IsDir():
			sb.fixed = append(sb.fixed, "--ro-bind", dir, dir)
			usr = usr || dir == "/usr"
		default:
			continue
		}
		sb.visible = append(sb.visible, dir)
	}
	if !usr {
		return nil, errors.New("the sandbox shows /usr, and this system has no /usr directory")
	}
	for _, f := range etcFiles {
		sb.fixed = append(sb.fixed, "--ro-bind-try", "/etc/"+f, "/etc/"+f)
	}
	for _, dir := range cfg.ReadOnly {
		abs, err := readOnlyDir(dir, append(append([]string(nil), cfg.Hidden...), cfg.GoSeed))
		if err != nil {
			return nil, err
		}
		// After the run's own directories, in case one is below /tmp.
		sb.readOnly = append(sb.readOnly, "--ro-bind", abs, abs)
		sb.visible = append(sb.visible, abs)
	}
	hidden := cfg.Hidden
	if cfg.GoSeed != "" {
		if sb.goSeedDir, err = filepath.Abs(cfg.GoSeed); err != nil {
			return nil, err
		}
		hidden = append(append([]string(nil), hidden...), sb.goSeedDir)
	}
	for _, h := range hidden {
		if h == "" {
			continue
		}
		real := realPath(h)
		for _, v := range sb.visible {
			if within(real, realPath(v)) {
				return nil, fmt.Errorf("%s lies in %s, which the sandbox shows every validation: keep it elsewhere", h, v)
			}
		}
	}
	sb.path = sandboxPATH(cfg.PATH, sb.visible)
	return sb, nil
}

// realPath answers p absolute and without symbolic links, as far as it exists.
func realPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// readOnlyDir checks a directory the operator shows the command and answers its absolute
// path, without symbolic links, which is where the command sees it.
func readOnlyDir(dir string, hidden []string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return "", fmt.Errorf("sandbox read-only directory %s: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("sandbox read-only directory %s: not a directory", dir)
	}
	if abs == "/" || abs == sandboxTmp || within(abs, "/ag") || within(abs, "/proc") || within(abs, "/dev") {
		return "", fmt.Errorf("sandbox read-only directory %s: /, /tmp, /ag, /proc and /dev are the sandbox's own", dir)
	}
	for _, h := range hidden {
		if h != "" && within(realPath(h), abs) {
			return "", fmt.Errorf("sandbox read-only directory %s holds %s, which validations must not read: show a directory that does not", dir, h)
		}
	}
	return abs, nil
}

// within reports whether p is dir or lies below it; both are clean absolute paths.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// sandboxPATH answers the command's PATH: the absolute directories of the worker's PATH that
// the sandbox shows, in order, or defaultSandboxPATH when there is none.
func sandboxPATH(workerPATH string, visible []string) string {
	var keep []string
	for _, d := range filepath.SplitList(workerPATH) {
		if !path.IsAbs(d) {
			continue // would find programs in the checkout
		}
		d = path.Clean(d)
		for _, v := range visible {
			if within(d, v) {
				keep = append(keep, d)
				break
			}
		}
	}
	if len(keep) == 0 {
		return defaultSandboxPATH
	}
	return strings.Join(keep, ":")
}

// Env answers the command's environment in the sandbox: nothing of the worker's, only what
// builds need, in the run's private directories, and then the policy's variables, which win.
func (sb *Sandbox) Env(policy map[string]string) ([]string, error) {
	return commandEnv([]string{
		"PATH=" + sb.path,
		"HOME=" + sandboxHome,
		"TMPDIR=" + sandboxTmp,
		"LANG=C.UTF-8",
		"GOCACHE=" + sandboxHome + "/.cache/go-build",
		"GOPATH=" + sandboxHome + "/go",
		"GOMODCACHE=" + sandboxHome + "/go/pkg/mod",
	}, policy)
}

// boxDirs are the host directories of one run that the sandbox shows read-write, and its
// network.
type boxDirs struct {
	Tree string // shown as sandboxTree, the command's working directory
	Home string // shown as sandboxHome
	Tmp  string // shown as sandboxTmp
	// Shm is shown as /dev/shm, where POSIX shared memory lives. Without it /dev/shm is a
	// directory of bwrap's /dev, a tmpfs as large as half the machine's memory; with it, the
	// run's shared memory is on the run's disk, within its limit, and /dev is read-only.
	Shm string
	// Network is the run's network: attest.NetworkNone (also for ""), NetworkEgress, with
	// EgressSocket the host path of the proxy's socket, or NetworkShared.
	Network      string
	EgressSocket string
	// TreeReadOnly shows Tree read-only: the prepare phase writes nothing of the tree.
	TreeReadOnly bool
	// Mounts are the repository's prepared caches (prepare.go), writable in the prepare phase
	// and read-only to the command.
	Mounts []boxMount
	// GoCacheProg shows this program as sandboxGoCacheProg, the command's GOCACHEPROG.
	GoCacheProg bool
}

// boxMount is a host directory the sandbox shows at Inner.
type boxMount struct {
	Host, Inner string
	ReadOnly    bool
}

// makeBoxDirs creates the private home, temporary and shared memory directories of a run in
// dir, beside its checkout tree, and answers them.
func makeBoxDirs(dir, tree string) (boxDirs, error) {
	d := boxDirs{Tree: tree, Home: filepath.Join(dir, "home"), Tmp: filepath.Join(dir, "tmp"), Shm: filepath.Join(dir, "shm")}
	for _, p := range []string{d.Home, d.Tmp, d.Shm} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return d, err
		}
	}
	return d, nil
}

// hostPath answers the host path of the path inner as the sandbox shows it, and whether the
// sandbox shows it at all.
func (sb *Sandbox) hostPath(dirs boxDirs, inner string) (string, bool) {
	inner = path.Clean(inner)
	for _, v := range sb.visible { // first: an operator's directory may be below /tmp
		if within(inner, v) {
			return inner, true
		}
	}
	for _, m := range [...]struct{ inner, host string }{
		{sandboxTree, dirs.Tree}, {sandboxHome, dirs.Home}, {sandboxTmp, dirs.Tmp},
	} {
		if within(inner, m.inner) {
			return filepath.Join(m.host, filepath.FromSlash(strings.TrimPrefix(inner, m.inner))), true
		}
	}
	return "", false
}

// lookPath checks, through the host paths of what the sandbox shows, that the command name
// can be started in it: a name with a '/' from the checkout, a bare name from the absolute
// directories of the command's PATH. A command that cannot start is the worker's failure to
// run the job, not a failed validation.
func (sb *Sandbox) lookPath(name string, dirs boxDirs, env []string) error {
	if strings.Contains(name, "/") {
		inner := name
		if !path.IsAbs(inner) {
			inner = path.Join(sandboxTree, inner)
		}
		host, ok := sb.hostPath(dirs, inner)
		if !ok {
			return fmt.Errorf("command %q: the sandbox does not show %s (add its directory with --sandbox-ro)", name, inner)
		}
		if _, err := exec.LookPath(host); err != nil {
			return fmt.Errorf("command %q: %w", name, err)
		}
		return nil
	}
	pathEnv := lastValue(env, "PATH")
	for _, d := range filepath.SplitList(pathEnv) {
		if !path.IsAbs(d) {
			continue
		}
		if host, ok := sb.hostPath(dirs, d); ok {
			if _, err := exec.LookPath(filepath.Join(host, name)); err == nil {
				return nil
			}
		}
	}
	return fmt.Errorf("command %q: %w in the sandbox (PATH=%s; a directory outside /usr needs --sandbox-ro)", name, exec.ErrNotFound, pathEnv)
}

// lastValue answers the value of the last name=... in env: the one a program sees.
func lastValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if val, ok := strings.CutPrefix(kv, name+"="); ok {
			v = val
		}
	}
	return v
}

// boxRun is one run of bwrap: the pipes that hand it its arguments and answer where its
// sandbox lives.
type boxRun struct {
	args     []byte
	argsR    *os.File // the child's end: bwrap --args 3
	argsW    *os.File
	infoR    *os.File
	infoW    *os.File // the child's end: bwrap --info-fd 4
	infoDone chan struct{}
	info     sandboxInfo // set before infoDone is closed
	// The command proves it started, inside the sandbox, with a byte on fd 5 (startShell): bwrap
	// tells where its sandbox is before it has made its mounts, so a setup that fails after
	// that (a --sandbox-ro directory gone) would otherwise look like a command that failed.
	startR    *os.File
	startW    *os.File // the child's end
	startDone chan struct{}
	ran       bool // set before startDone is closed
	// onStart, when set, is called once the command has proved it started: bwrap has made
	// every mount of the sandbox by then.
	onStart func()
}

// startShell is what bwrap runs: it writes the proof of start on fd 5, closes it, and becomes
// the command ("$@"), so the command neither sees fd 5 nor has another process above it.
const startShell = `printf x >&5 && exec 5>&- && exec "$@"`

// sandboxInfo is what bwrap --info-fd tells of a sandbox.
type sandboxInfo struct {
	ChildPID int    `json:"child-pid"` // the sandbox's first process, its PID namespace's init
	PIDNS    uint64 `json:"pid-namespace"`
}

// command answers the bwrap command that runs argv in the sandbox with env, in the run's
// directories, writing to out. Its arguments go through a pipe (--args) rather than the
// command line, which every process in the sandbox could read from /proc/1/cmdline.
func (sb *Sandbox) command(argv []string, dirs boxDirs, env []string, out *os.File) (*exec.Cmd, *boxRun, error) {
	args := append([]string(nil), sb.fixed...)
	treeBind := "--bind"
	if dirs.TreeReadOnly {
		treeBind = "--ro-bind"
	}
	args = append(args,
		treeBind, dirs.Tree, sandboxTree,
		"--bind", dirs.Home, sandboxHome,
		"--bind", dirs.Tmp, sandboxTmp,
	)
	for _, m := range dirs.Mounts {
		bind := "--bind"
		if m.ReadOnly {
			bind = "--ro-bind"
		}
		args = append(args, bind, m.Host, m.Inner)
	}
	if dirs.GoCacheProg {
		if sb.self == "" {
			return nil, nil, errors.New("sandbox: the Go preset's cache program is this program, and its executable is not found")
		}
		args = append(args, "--ro-bind", sb.self, sandboxGoCacheProg)
	}
	if dirs.Shm != "" {
		args = append(args, "--bind", dirs.Shm, "/dev/shm", "--remount-ro", "/dev")
	}
	// What bwrap runs: the start proof, then the command. With egress, the forwarder first,
	// which listens on the sandbox's loopback before it becomes the start shell.
	inner := []string{"/bin/sh", "-c", startShell, "ag-validate"}
	switch dirs.Network {
	case attest.NetworkShared:
		if !sb.shared {
			return nil, nil, errors.New("sandbox: a run asked for the worker's network, and this worker keeps it from validations")
		}
	case attest.NetworkEgress:
		if dirs.EgressSocket == "" || sb.forwarder == "" {
			return nil, nil, errors.New("sandbox: a run with egress needs the proxy's socket and the forwarder")
		}
		args = append(args, "--unshare-net",
			"--bind", dirs.EgressSocket, sandboxEgressSocket,
			"--ro-bind", sb.forwarder, sandboxForwarder)
		inner = append([]string{sandboxForwarder}, inner...)
	default:
		args = append(args, "--unshare-net")
	}
	args = append(args, sb.readOnly...)
	args = append(args,
		// The rest of the sandbox's root is bwrap's own tmpfs: nothing to write there either.
		"--remount-ro", "/",
		"--chdir", sandboxTree,
		"--info-fd", "4",
	)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	var nul strings.Builder
	for _, a := range args {
		if strings.ContainsRune(a, 0) {
			return nil, nil, fmt.Errorf("sandbox argument %q holds a NUL", a)
		}
		nul.WriteString(a)
		nul.WriteByte(0)
	}
	b := &boxRun{args: []byte(nul.String()), infoDone: make(chan struct{})}
	var err error
	if b.argsR, b.argsW, err = os.Pipe(); err != nil {
		return nil, nil, err
	}
	if b.infoR, b.infoW, err = os.Pipe(); err != nil {
		b.close()
		return nil, nil, err
	}
	if b.startR, b.startW, err = os.Pipe(); err != nil {
		b.close()
		return nil, nil, err
	}
	b.startDone = make(chan struct{})
	// Go opens its own files close-on-exec; one the worker inherited open (a key file, a
	// socket of whoever started it) would pass through bwrap to the command.
	if err := closeInheritedOnExec(); err != nil {
		b.close()
		return nil, nil, fmt.Errorf("sandbox: keep inherited files from the command: %w", err)
	}
	cmd := &exec.Cmd{
		Path: sb.bwrap,
		Args: append(append([]string{sb.bwrap, "--args", "3", "--"}, inner...), argv...),
		// On the host side, bwrap works in the checkout too, where ReapOrphans looks for
		// what a dead worker left.
		Dir:        dirs.Tree,
		Env:        []string{}, // not nil, which would be the worker's environment
		Stdout:     out,
		Stderr:     out,
		ExtraFiles: []*os.File{b.argsR, b.infoW, b.startW},
	}
	return cmd, b, nil
}

// started hands bwrap its arguments and reads what it tells of its sandbox, once bwrap runs.
func (b *boxRun) started() {
	b.argsR.Close()
	b.infoW.Close()
	b.startW.Close()
	go func() {
		defer close(b.startDone)
		var one [1]byte
		n, _ := b.startR.Read(one[:])
		b.ran = n == 1
		if b.ran && b.onStart != nil {
			b.onStart()
		}
	}()
	go func() {
		// More than a pipe holds would block until bwrap reads it.
		_, _ = b.argsW.Write(b.args)
		b.argsW.Close()
	}()
	go func() {
		defer close(b.infoDone)
		// bwrap writes one JSON object and keeps the pipe open: decode, do not wait for EOF.
		_ = json.NewDecoder(b.infoR).Decode(&b.info)
	}()
}

// close lets go of the pipes (the ends that were not handed to bwrap, or all of them when
// it did not start).
func (b *boxRun) close() {
	for _, f := range []*os.File{b.argsR, b.argsW, b.infoR, b.infoW, b.startR, b.startW} {
		if f != nil {
			f.Close()
		}
	}
}

// end is called once bwrap is gone: it kills what is left of the sandbox (its PID
// namespace's init, whose death kills every process of the namespace) and waits until no
// process of the namespace is alive, at most for wait. It answers whether the sandbox is
// gone, and whether it had a PID namespace other than the worker's.
func (b *boxRun) end(wait time.Duration) (gone, ownPIDNS bool) {
	select {
	case <-b.infoDone:
	case <-time.After(wait):
		// bwrap is gone, so the pipe has no writer but processes of the sandbox, which
		// bwrap does not give it to.
	}
	b.infoR.Close()
	select {
	case <-b.infoDone:
	default:
		return true, false // bwrap never made a sandbox: nothing to end
	}
	if b.info.ChildPID <= 1 || b.info.PIDNS == 0 {
		return true, false // bwrap failed before it made one
	}
	ours, err := pidNamespace("self")
	ownPIDNS = err == nil && ours != b.info.PIDNS
	if !ownPIDNS {
		return true, false // never kill in our own namespace
	}
	return endNamespace(b.info.ChildPID, b.info.PIDNS, wait), true
}

// commandRan reports whether the command started inside the sandbox, once bwrap and every
// process of the sandbox are gone (the pipe has no writer left), or after wait.
func (b *boxRun) commandRan(wait time.Duration) bool {
	select {
	case <-b.startDone:
	case <-time.After(wait):
		_ = b.startR.SetReadDeadline(time.Now())
		<-b.startDone
	}
	return b.ran
}

// SelfCheck runs a command in the sandbox, in a run directory under workDir as validations
// do, and answers an error unless it ran in a PID namespace of its own, with its checkout
// writable. A worker checks this before it claims validations: bubblewrap may be there and
// still unable to work (no user namespaces for the worker's user, a kernel that refuses).
func (sb *Sandbox) SelfCheck(ctx context.Context, workDir string) error {
	rd, err := newRunDir(workDir)
	if err != nil {
		return fmt.Errorf("sandbox self-check: %w", err)
	}
	defer rd.remove()
	tree := filepath.Join(rd.path, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return fmt.Errorf("sandbox self-check: %w", err)
	}
	dirs, err := makeBoxDirs(rd.path, tree)
	if err != nil {
		return fmt.Errorf("sandbox self-check: %w", err)
	}
	env, err := sb.Env(nil)
	if err != nil {
		return err
	}
	res, err := runCommand(ctx, runSpec{
		Argv: []string{"sh", "-c", `echo "$$" > ./pid`},
		Dir:  tree, Env: env, Timeout: 30 * time.Second, LogPath: filepath.Join(rd.path, "output.log"),
		Grace: time.Second, Sandbox: sb, Box: dirs,
	})
	if err != nil {
		return fmt.Errorf("sandbox self-check: %w", err)
	}
	if res.ExitCode != 0 || res.Survivors {
		return fmt.Errorf("sandbox self-check: %s exited with status %d, survivors %v:\n%s", sb.bwrap, res.ExitCode, res.Survivors, strings.TrimSpace(res.Tail))
	}
	inner, err := os.ReadFile(filepath.Join(tree, "pid"))
	if err != nil {
		return fmt.Errorf("sandbox self-check: the command could not write its checkout: %w", err)
	}
	if !res.OwnPIDNamespace {
		return fmt.Errorf("sandbox self-check: the command (pid %s in the sandbox) ran in the worker's PID namespace", strings.TrimSpace(string(inner)))
	}
	return nil
}

// Bwrap answers the bubblewrap executable the sandbox runs.
func (sb *Sandbox) Bwrap() string { return sb.bwrap }
