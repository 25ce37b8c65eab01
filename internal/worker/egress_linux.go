//go:build linux

package worker

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The forwarder is this program, run by bwrap in the sandbox as sandboxForwarder (and so is the
// Go preset's GOCACHEPROG, as sandboxGoCacheProg). A program
// that links this package (ag-worker, and its tests) becomes the forwarder when started under
// one of these names, before its main runs: bwrap starts the sandbox's first process by path,
// with no way to name a function in it.
const (
	forwarderSpawnName = "ag-egress-spawn" // starts the server, detached, and exits
	forwarderServeName = "ag-egress-serve" // serves the listeners it was handed
)

func init() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case sandboxForwarder:
		forwardThenExec(os.Args[1:])
	case forwarderSpawnName:
		spawnForwarder(os.Args[1:])
	case forwarderServeName:
		serveForwarder(os.Args[1:])
	case sandboxGoCacheProg:
		runGoCacheProg(os.Args[1:])
	}
}

// runGoCacheProg is GOCACHEPROG for a run of the Go preset: this program, shown in the sandbox
// as sandboxGoCacheProg and started by the run's go with the prepared cache and the run's own
// directory (gocacheprog.go).
func runGoCacheProg(args []string) {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "ag-worker go cache: want the prepared cache and the run's own directory")
		os.Exit(2)
	}
	if err := serveGoCache(os.Stdin, os.Stdout, args[0], args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "ag-worker go cache:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// forwarderFail says why the forwarder stopped, in the run's output, and ends the run's start:
// 125 is the start shell's status for a sandbox that could not be set up.
func forwarderFail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "ag-worker egress forwarder: "+format+"\n", a...)
	os.Exit(125)
}

// forwardThenExec listens on the sandbox's loopback, has a detached process serve the
// listeners, and becomes argv (the start shell): the command runs only once the port is
// open, and its own process has no child of ours to wait for.
func forwardThenExec(argv []string) {
	if len(argv) == 0 {
		forwarderFail("no command")
	}
	ln, err := net.Listen("tcp4", egressListen)
	if err != nil {
		forwarderFail("listen on %s: %v", egressListen, err)
	}
	files := []*os.File{listenerFile(ln)}
	if _, port, _ := net.SplitHostPort(egressListen); port != "" {
		// The sandbox may have no IPv6 loopback: then the IPv4 one serves alone.
		if ln6, err := net.Listen("tcp6", net.JoinHostPort("::1", port)); err == nil {
			files = append(files, listenerFile(ln6))
		}
	}
	// Only the listeners go to the server: the start proof (fd 5) must close when the command
	// ends, not when the forwarder does.
	if err := closeInheritedOnExec(); err != nil {
		forwarderFail("%v", err)
	}
	spawn := &exec.Cmd{Path: sandboxForwarder, Args: []string{forwarderSpawnName, strconv.Itoa(len(files))}, ExtraFiles: files, Stderr: os.Stderr}
	if err := spawn.Run(); err != nil {
		forwarderFail("start the server: %v", err)
	}
	if _, err := unix.FcntlInt(5, unix.F_SETFD, 0); err != nil {
		forwarderFail("keep the start proof: %v", err)
	}
	err = syscall.Exec(argv[0], argv, os.Environ())
	forwarderFail("exec %s: %v", argv[0], err)
}

func listenerFile(ln net.Listener) *os.File {
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		forwarderFail("%v", err)
	}
	return f
}

// spawnForwarder starts the server with the n listeners it was handed (fds 3...) and exits
// without waiting: the server's parent becomes the sandbox's init, which outlives it.
func spawnForwarder(args []string) {
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		forwarderFail("bad listener count %q", args)
	}
	files := make([]*os.File, n)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), "listener")
	}
	serve := &exec.Cmd{Path: sandboxForwarder, Args: []string{forwarderServeName, args[0]}, ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := serve.Start(); err != nil {
		forwarderFail("start the server: %v", err)
	}
	os.Exit(0)
}

// serveForwarder carries every connection to the listeners it was handed to the proxy's
// socket, until the sandbox ends.
func serveForwarder(args []string) {
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		forwarderFail("bad listener count %q", args)
	}
	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forwardConn(c)
		}
	}
	for i := n - 1; i >= 0; i-- {
		ln, err := net.FileListener(os.NewFile(uintptr(3+i), "listener"))
		if err != nil {
			forwarderFail("%v", err)
		}
		if i > 0 {
			go serve(ln)
		} else {
			serve(ln)
		}
	}
	os.Exit(0)
}

func forwardConn(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("unix", sandboxEgressSocket)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, c)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
}
