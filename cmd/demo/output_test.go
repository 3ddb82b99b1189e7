package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScreenLine: which of the manager's lines the screen shows, and how.
func TestScreenLine(t *testing.T) {
	cases := []struct {
		name, line string
		want       string // "" when hidden
	}{
		{"info stays in the file",
			`{"level":"info","ts":"2026-12-01T10:00:00Z","logger":"setup","msg":"starting manager"}`, ""},
		{"a V-level stays in the file",
			`{"level":"Level(-2)","ts":"2026-12-01T10:00:00Z","msg":"detail"}`, ""},
		{"debug stays in the file",
			`{"level":"debug","msg":"detail"}`, ""},
		{"an error shows with its error first, the other fields by name, no stack trace",
			`{"level":"error","ts":"2026-12-01T10:00:00Z","logger":"proxy","caller":"x.go:1","msg":"Reconciler error","reconcileID":"r1","Proxy":{"name":"p","namespace":"default"},"error":"conflict: try again","attempt":3,"stacktrace":"a\nb"}`,
			`ERROR proxy: Reconciler error error="conflict: try again" Proxy={"name":"p","namespace":"default"} attempt=3 reconcileID=r1`},
		{"a warning shows, without a logger",
			`{"level":"warn","msg":"slow","took":"3s","empty":""}`,
			`WARN slow empty="" took=3s`},
		{"plain text shows as it is (a start-up error)",
			`egress-proxies-operator: providers config cmd/demo/providers.yaml: no such file`,
			`egress-proxies-operator: providers config cmd/demo/providers.yaml: no such file`},
		{"a panic's line shows as it is",
			`panic: runtime error: index out of range [1] with length 1`,
			`panic: runtime error: index out of range [1] with length 1`},
		{"JSON that is no log record shows as it is",
			`{"a":1}`, `{"a":1}`},
		{"broken JSON shows as it is",
			`{"level":"info"`, `{"level":"info"`},
		{"a blank line is dropped", "   ", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := screenLine(c.line)
			if ok != (c.want != "") || got != c.want {
				t.Errorf("screenLine(%s)\n got %q, %v\nwant %q, %v", c.line, got, ok, c.want, c.want != "")
			}
		})
	}
}

// TestManagerOutput: the file gets every byte the manager wrote, the screen
// the lines screenLine keeps, whole, however the writes split them.
func TestManagerOutput(t *testing.T) {
	var screen bytes.Buffer
	p := &printer{w: &screen}
	path := filepath.Join(t.TempDir(), "sub", "manager.log")
	out, err := newManagerOutput(p, "manager | ", path)
	if err != nil {
		t.Fatal(err)
	}
	all := `{"level":"info","msg":"starting"}` + "\n" +
		`{"level":"error","msg":"Reconciler error","error":"boom"}` + "\n" +
		"egress-proxies-operator: bad flag\n" +
		"no newline at the end"
	for i := 0; i < len(all); i += 7 { // lines split across writes
		n, err := out.Write([]byte(all[i:min(i+7, len(all))]))
		if err != nil || n != min(7, len(all)-i) {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(file) != all {
		t.Errorf("the log file holds\n%s\nwant every byte written:\n%s", file, all)
	}
	want := strings.Join([]string{
		"manager | ERROR Reconciler error error=boom",
		"manager | egress-proxies-operator: bad flag",
		"manager | no newline at the end",
	}, "\n") + "\n"
	if screen.String() != want {
		t.Errorf("the screen shows\n%s\nwant\n%s", screen.String(), want)
	}
}
