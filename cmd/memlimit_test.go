package main

import (
	"strings"
	"testing"
)

func TestGoMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, gomemlimit, limit string
		want                    int64
		err                     string
	}{
		{"the downward API's bytes", "", "268435456", 176 << 20, ""},
		{"a quantity", "", "256Mi", 176 << 20, ""},
		{"a large limit: the reserve alone", "", "1Gi", 944 << 20, ""},
		{"a small limit: half of it", "", "96Mi", 48 << 20, ""},
		{"no limit in the environment", "", "", 0, ""},
		{"GOMEMLIMIT set explicitly wins", "300MiB", "256Mi", 0, ""},
		{"garbage", "", "lots", 0, `MEMORY_LIMIT "lots": not a quantity`},
		{"zero", "", "0", 0, `MEMORY_LIMIT "0": want a positive number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := goMemoryLimit(tc.gomemlimit, tc.limit)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
