//go:build !linux

package pgtest

// clusterParent answers where the cluster's directory goes.
func clusterParent() string { return "/tmp" }
