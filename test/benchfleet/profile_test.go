package main

import "testing"

func TestMemStats(t *testing.T) {
	got := memStats("heap profile: 1: 2 [3: 4] @ heap/1048576\n1: 2 [3: 4] @ 0x1\n#\t0x1\tmain.f+0x1\n\n" +
		"# runtime.MemStats\n# Alloc = 100\n# HeapInuse = 4096\n# Stack = 8192 / 8192\n# PauseNs = [1 2 3]\n# Sys = 65536\n")
	for name, want := range map[string]uint64{"HeapInuse": 4096, "Stack": 8192, "Sys": 65536, "Alloc": 100} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d (all: %v)", name, got[name], want, got)
		}
	}
	if _, ok := got["PauseNs"]; ok {
		t.Errorf("took the list PauseNs as a figure: %v", got)
	}
}
