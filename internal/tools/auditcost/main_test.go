package main

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestRateBetweenCountsOnlyTheReportsOfTheTurn(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	progress := []sample{
		{at(0), 0},        // before the turn's measured part
		{at(500), 9000},   // first in it
		{at(1000), 14000}, //
		{at(1500), 19000}, // last in it
		{at(5000), 90000}, // another turn's
	}
	rate, ok := rateBetween(progress, at(400), at(2000))
	if !ok || rate != 10000 {
		t.Errorf("rate = %v, %v; want 10000 jobs/s from 9,000 to 19,000 jobs in a second", rate, ok)
	}
	if _, ok := rateBetween(progress, at(600), at(1200)); ok {
		t.Error("one report in the turn gave a rate")
	}
	if _, ok := rateBetween(progress, at(2000), at(4000)); ok {
		t.Error("no report in the turn gave a rate")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestChildrenOfFindsAChildProcess(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }() //nolint:errcheck // it is killed
	if got := childrenOf(os.Getpid()); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("childrenOf(this process) = %v, want it to hold %d", got, cmd.Process.Pid)
	}
	if got := childrenOf(cmd.Process.Pid); len(got) != 0 {
		t.Errorf("childrenOf(sleep) = %v, want none", got)
	}
}
