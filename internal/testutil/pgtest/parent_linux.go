package pgtest

import (
	"os"
	"syscall"
)

// clusterParent answers where the cluster's directory goes: /dev/shm when it is a roomy memory
// file system, since the cluster is thrown away anyway and CREATE DATABASE, which copies a
// template, is several times faster there than on a busy disk; /tmp otherwise (a container's
// /dev/shm is often 64 MiB, too small for a cluster).
func clusterParent() string {
	const shm, enough = "/dev/shm", 1 << 30
	var fs syscall.Statfs_t
	if err := syscall.Statfs(shm, &fs); err == nil && uint64(fs.Bavail)*uint64(fs.Bsize) >= enough {
		if probe, err := os.MkdirTemp(shm, "agpgprobe"); err == nil {
			os.Remove(probe)
			return shm
		}
	}
	return "/tmp"
}
