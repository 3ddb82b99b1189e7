package policy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/egress"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/squid/squidtest"
	"github.com/egress-proxies-operator/egress-proxies-operator/internal/testenv"
)

// accessLog reads one proxy's access log lines (egress.AccessLogFields),
// each as field -> value text.
type accessLog interface {
	lines(t *testing.T) []map[string]string
}

// squidLog is Squid's output file: its access lines are the JSON ones.
type squidLog string

func (f squidLog) lines(t *testing.T) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(string(f))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := squidtest.AccessLines(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// localLog is the local provider's logger: its access lines are the V(1)
// "access" ones, key="value" or key=number.
type localLog struct{ *testenv.LogLines }

var funcrPair = regexp.MustCompile(`"([a-z_]+)"=("(?:[^"\\]|\\.)*"|[0-9-]+)`)

func (l localLog) lines(t *testing.T) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, line := range l.Find(`"msg"="access"`) {
		m := map[string]string{}
		for _, kv := range funcrPair.FindAllStringSubmatch(line, -1) {
			v := kv[2]
			if strings.HasPrefix(v, `"`) {
				if err := json.Unmarshal([]byte(v), &v); err != nil {
					t.Fatalf("local's access line %q: %v", line, err)
				}
			}
			m[kv[1]] = v
		}
		out = append(out, m)
	}
	return out
}

// logged waits until log has n lines and returns the nth (1-based): a
// proxy writes a request's line when the request has ended, which may be
// after its client read the answer.
func logged(t *testing.T, log accessLog, n int) map[string]string {
	t.Helper()
	var lines []map[string]string
	testenv.Eventually(t, fmt.Sprintf("access line %d", n), func() bool {
		lines = log.lines(t)
		return len(lines) >= n
	})
	line := lines[n-1]
	for _, f := range egress.AccessLogFields {
		if _, ok := line[f]; !ok {
			t.Errorf("access line %v lacks %s", line, f)
		}
	}
	return line
}

// sameLine compares the fields both proxies must write alike for one
// request (time, bytes and duration are each proxy's own), and says what
// differs.
func sameLine(local, squid map[string]string, withStatus bool) string {
	fields := []string{"client", "user", "method", "host", "port", "decision", "rule"}
	if withStatus {
		fields = append(fields, "status")
	}
	var diffs []string
	for _, f := range fields {
		if local[f] != squid[f] {
			diffs = append(diffs, fmt.Sprintf("%s: local %q, squid %q", f, local[f], squid[f]))
		}
	}
	return strings.Join(diffs, "; ")
}
