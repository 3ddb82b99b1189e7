package egress

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The text a client chooses is escaped as Squid's "#" logformat encoding
// does, so that no user name or host breaks a JSON line.
func TestLogEscape(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                 "alice",
		`ev"il\x`:               "ev%22il%5Cx",
		"ctl\x01u":              "ctl%01u",
		"line\nbreak":           "line%0Abreak",
		"sp ace":                "sp%20ace",
		"caf\xc3\xa9":           "caf%C3%A9",
		"a.b-c_d:e@f=g;h/i?j&k": "a.b-c_d:e@f=g;h/i?j&k", // reserved, not unsafe
		"<>#%{}|^~[]`'":         "%3C%3E%23%25%7B%7D%7C%5E%7E%5B%5D%60%27",
	} {
		if got := LogEscape(in); got != want {
			t.Errorf("LogEscape(%q) = %q, want %q", in, got, want)
		}
		var back string
		if err := json.Unmarshal([]byte(`"`+LogEscape(in)+`"`), &back); err != nil || back != LogEscape(in) {
			t.Errorf("LogEscape(%q) written in quotes is no JSON string of itself: %q, %v", in, back, err)
		}
	}
}

// Hosts as Squid keeps them (checked against the real Squid by test/policy).
func TestLogHost(t *testing.T) {
	for in, want := range map[string]string{
		"API.Partner.Example.": "api.partner.example",
		"127.0.0.1":            "127.0.0.1",
		"[::ffff:127.0.0.7]":   "127.0.0.7",
		"[::1]":                "[::1]",
		"::":                   "[::]",
		"[2001:db8:1::5]":      "[2001:db8:1::5]",
		"[::7f00:7]":           "[::127.0.0.7]",
		"[::1:0]":              "[::0.1.0.0]",
		"[64:ff9b::7f00:7]":    "[64:ff9b::7f00:7]",
	} {
		if got := LogHost(in); got != want {
			t.Errorf("LogHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// An entry's key/value pairs are AccessLogFields in order, and make a JSON
// object whatever the client sent.
func TestAccessEntryKeysAndValues(t *testing.T) {
	e := AccessEntry{Time: time.Date(2026, 12, 2, 16, 0, 0, 7e6, time.UTC), Client: "10.0.0.7", User: "al\"ice\x00",
		Method: "GET", Host: "Api.Example.", Port: 443, Status: 200, BytesIn: 10, BytesOut: 20,
		Duration: 1500 * time.Millisecond, Decision: DecisionAllowed, Rule: RuleName(1)}
	kv := e.KeysAndValues()
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		if kv[i] != AccessLogFields[i/2] {
			t.Fatalf("key %d is %v, want %s", i/2, kv[i], AccessLogFields[i/2])
		}
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"bytes_in":10,"bytes_out":20,"client":"10.0.0.7","decision":"allowed","duration_ms":1500,"host":"api.example","method":"GET","port":"443","rule":"destinations[1]","status":200,"time":"2026-12-02T16:00:00.007Z","user":"al%22ice%00"}`
	if string(b) != want {
		t.Errorf("entry as JSON:\n%s\nwant\n%s", b, want)
	}
	none := AccessEntry{}.KeysAndValues()
	if got := fmt.Sprintln(none[3], none[5], none[7], none[9], none[11], none[21], none[23]); got != strings.Repeat("- ", 6)+"-\n" {
		t.Errorf("an empty entry's text fields are %s, want -", got)
	}
}
