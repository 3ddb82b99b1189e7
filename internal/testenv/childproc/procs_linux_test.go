package childproc

import (
	"os"
	"strings"
	"testing"
)

// The status fields parse to bytes: this process has a binary mapped, so
// file pages, and its peak holds at least them.
func TestStatusBytes(t *testing.T) {
	peak, err := PeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	file, err := FileRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if file <= 0 || file%1024 != 0 || peak < file {
		t.Fatalf("peak %d, file %d bytes", peak, file)
	}
	if _, err := statusBytes(os.Getpid(), "NoSuchField"); err == nil || !strings.Contains(err.Error(), "no NoSuchField") {
		t.Fatalf("missing field: %v", err)
	}
}
