package squidtest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// AccessLines are the access log lines (JSON, egress.AccessLogFields) in
// text, Squid's output with its cache log mixed in, each as field -> value
// text. A line that starts like one and is no JSON is an error.
func AccessLines(text string) ([]map[string]string, error) {
	var out []map[string]string
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(l), &raw); err != nil {
			return nil, fmt.Errorf("access line is no JSON (%v): %q", err, l)
		}
		m := make(map[string]string, len(raw))
		for k, v := range raw {
			m[k] = fmt.Sprint(v)
		}
		out = append(out, m)
	}
	return out, nil
}

// FindAccess is the first of lines holding every field of want.
func FindAccess(lines []map[string]string, want map[string]string) (map[string]string, bool) {
	for _, l := range lines {
		match := true
		for k, v := range want {
			match = match && l[k] == v
		}
		if match {
			return l, true
		}
	}
	return nil, false
}
