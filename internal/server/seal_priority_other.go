//go:build !linux

package server

// lowerSealerPriority does nothing where a thread has no priority of its own to set.
func lowerSealerPriority() error { return nil }
