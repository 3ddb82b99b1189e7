package local

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParse(t *testing.T) {
	path := field.NewPath("providers").Index(0).Child("local")
	cases := []struct {
		name    string
		raw     string
		want    string // BindCIDR after defaults, when valid
		wantErr []string
	}{
		{name: "absent block gives the default", raw: "", want: DefaultBindCIDR},
		{name: "empty block gives the default", raw: `{}`, want: DefaultBindCIDR},
		{name: "explicit range", raw: `{"bindCIDR":"127.0.200.0/28"}`, want: "127.0.200.0/28"},
		{name: "the whole loopback range", raw: `{"bindCIDR":"127.0.0.0/8"}`, want: "127.0.0.0/8"},
		{name: "smallest range with two addresses", raw: `{"bindCIDR":"127.0.0.0/30"}`, want: "127.0.0.0/30"},
		{name: "top /30 loses the broadcast", raw: `{"bindCIDR":"127.255.255.252/30"}`, want: "127.255.255.252/30"},
		{
			name:    "unknown field",
			raw:     `{"bindCIDR":"127.0.100.0/24","bindCidr":"x"}`,
			wantErr: []string{"providers[0].local.bindCidr", "unknown field"},
		},
		{
			name:    "wrong type",
			raw:     `{"bindCIDR":24}`,
			wantErr: []string{"providers[0].local.bindCIDR", "expected a string"},
		},
		{
			name:    "not a CIDR",
			raw:     `{"bindCIDR":"127.0.100.1"}`,
			wantErr: []string{"providers[0].local.bindCIDR", "must be an IPv4 CIDR"},
		},
		{
			name:    "IPv6",
			raw:     `{"bindCIDR":"::1/128"}`,
			wantErr: []string{"providers[0].local.bindCIDR", "must be an IPv4 CIDR"},
		},
		{
			name:    "outside loopback",
			raw:     `{"bindCIDR":"10.0.0.0/24"}`,
			wantErr: []string{"providers[0].local.bindCIDR", "inside 127.0.0.0/8"},
		},
		{
			name:    "wider than loopback",
			raw:     `{"bindCIDR":"126.0.0.0/7"}`,
			wantErr: []string{"providers[0].local.bindCIDR", "inside 127.0.0.0/8"},
		},
		{name: "destination settings", raw: `{"allowedDestinations":["127.0.0.5/32","10.20.0.0/16"],"connectPorts":[443,8443]}`, want: DefaultBindCIDR},
		{
			name:    "allowed destination with host bits",
			raw:     `{"allowedDestinations":["127.0.0.5/32","10.20.0.1/16"]}`,
			wantErr: []string{"providers[0].local.allowedDestinations[1]", "write 10.20.0.0/16"},
		},
		{
			name:    "allowed destination /0",
			raw:     `{"allowedDestinations":["0.0.0.0/0"]}`,
			wantErr: []string{"providers[0].local.allowedDestinations[0]", "turn the destination deny off"},
		},
		{
			name:    "allowed destination of the wrong type",
			raw:     `{"allowedDestinations":"127.0.0.5/32"}`,
			wantErr: []string{"providers[0].local.allowedDestinations", "expected a list"},
		},
		{
			name:    "connect port out of range",
			raw:     `{"connectPorts":[443,65536]}`,
			wantErr: []string{"providers[0].local.connectPorts[1]", "1-65535"},
		},
		{
			name:    "host bits set",
			raw:     `{"bindCIDR":"127.0.100.7/24"}`,
			wantErr: []string{"providers[0].local.bindCIDR", "did you mean 127.0.100.0/24"},
		},
		{
			name:    "/32 has no usable address",
			raw:     `{"bindCIDR":"127.0.100.1/32"}`,
			wantErr: []string{"providers[0].local.bindCIDR", "holds 0 usable addresses"},
		},
		{
			name:    "/31 has one",
			raw:     `{"bindCIDR":"127.0.100.0/31"}`,
			wantErr: []string{"providers[0].local.bindCIDR", "holds 1 usable addresses"},
		},
		{
			name:    "/31 at 127.0.0.0 has none: 127.0.0.1 is skipped",
			raw:     `{"bindCIDR":"127.0.0.0/31"}`,
			wantErr: []string{"holds 0 usable addresses"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var raw json.RawMessage
			if tc.raw != "" {
				raw = json.RawMessage(tc.raw)
			}
			cfg, errs := Parse(raw, path)
			if len(tc.wantErr) == 0 {
				if len(errs) > 0 {
					t.Fatalf("Parse: %v", errs.ToAggregate())
				}
				if cfg.BindCIDR != tc.want {
					t.Errorf("BindCIDR = %q, want %q", cfg.BindCIDR, tc.want)
				}
				if _, err := New("p", cfg, optsFor("i")); err != nil {
					t.Errorf("New refused a config Parse accepted: %v", err)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("Parse accepted %s", tc.raw)
			}
			msg := errs.ToAggregate().Error()
			for _, want := range tc.wantErr {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
		})
	}
}

func TestUsableAddresses(t *testing.T) {
	cases := map[string]int{
		"127.0.100.0/24":     255,
		"127.0.0.0/24":       254, // and 127.0.0.1
		"127.0.0.0/8":        1<<24 - 3,
		"127.255.255.0/24":   254, // and the broadcast
		"127.0.100.0/30":     3,
		"127.255.255.252/30": 2,
	}
	for cidr, want := range cases {
		if got := usableAddresses(netip.MustParsePrefix(cidr)); got != want {
			t.Errorf("usableAddresses(%s) = %d, want %d", cidr, got, want)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	_, err := New("p", Config{BindCIDR: "10.0.0.0/24"}, optsFor("i"))
	if err == nil || !strings.Contains(err.Error(), "bindCIDR") {
		t.Errorf("New with a range outside loopback: %v, want an error naming bindCIDR", err)
	}
	p, err := New("p", Config{}, optsFor("i"))
	if err != nil {
		t.Fatalf("New with the zero config: %v", err)
	}
	if p.cidr.String() != DefaultBindCIDR {
		t.Errorf("zero config binds %s, want the default %s", p.cidr, DefaultBindCIDR)
	}
}
