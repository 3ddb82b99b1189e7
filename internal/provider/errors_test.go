package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestErrorClasses(t *testing.T) {
	cause := errors.New("backend said no")
	cases := []struct {
		name  string
		err   error
		class error
		label string
	}{
		{"not found", Wrap("p1", OpGet, ErrNotFound, cause), ErrNotFound, "NotFound"},
		{"permanent", Wrap("p1", OpCreate, ErrPermanent, cause), ErrPermanent, "Permanent"},
		{"quota", Wrap("p1", OpCreate, ErrQuotaExceeded, cause), ErrQuotaExceeded, "QuotaExceeded"},
		{"unclassified is transient", Wrap("p1", OpGet, nil, cause), ErrTransient, "Transient"},
		{"inner class wins", Wrap("p1", OpGet, ErrTransient, Errorf(ErrPermanent, "bad zone")), ErrPermanent, "Permanent"},
		{"wrapped by fmt", fmt.Errorf("outer: %w", Wrap("p1", OpDelete, ErrNotFound, cause)), ErrNotFound, "NotFound"},
		{"bare error", cause, ErrTransient, "Transient"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "bare error" && !errors.Is(tc.err, tc.class) {
				t.Errorf("errors.Is(%v, %v) = false", tc.err, tc.class)
			}
			if got := ClassOf(tc.err); got != tc.class {
				t.Errorf("ClassOf = %v, want %v", got, tc.class)
			}
			if got := ClassName(tc.err); got != tc.label {
				t.Errorf("ClassName = %q, want %q", got, tc.label)
			}
		})
	}
	if ClassName(nil) != "none" {
		t.Errorf("ClassName(nil) = %q", ClassName(nil))
	}
}

func TestWrapNamesProviderAndOperation(t *testing.T) {
	err := Wrap("eu-pool", OpCreate, nil, Errorf(ErrPermanent, "zone %q unknown", "x"))
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("not an *Error: %T", err)
	}
	if pe.Provider != "eu-pool" || pe.Op != OpCreate {
		t.Errorf("Provider=%q Op=%q", pe.Provider, pe.Op)
	}
	if !strings.Contains(err.Error(), `provider "eu-pool": create: zone "x" unknown`) {
		t.Errorf("message = %q", err.Error())
	}
	// A second Wrap keeps the first provider name.
	if again := Wrap("other", OpGet, ErrTransient, err); !strings.Contains(again.Error(), `"eu-pool"`) {
		t.Errorf("rewrapped = %q", again)
	}
	if Wrap("p", OpGet, ErrTransient, nil) != nil {
		t.Error("Wrap(nil) != nil")
	}
}

func TestCtxErr(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if CtxErr(ctx, "p", OpGet) != nil {
		t.Fatal("live ctx gave an error")
	}
	cancel()
	err := CtxErr(ctx, "p", OpGet)
	if !errors.Is(err, ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Errorf("CtxErr = %v", err)
	}
}

func TestSensitiveNeverPrints(t *testing.T) {
	const sentinel = "SENTINEL-cloud-init-7f3a"
	s := Sensitive(sentinel)
	req := CreateRequest{Name: "n", CloudInit: s}
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%v %s %q %x %#v", s, s, s, s, s),
		fmt.Sprintf("%+v", req), fmt.Sprintf("%#v", req),
	} {
		if strings.Contains(out, sentinel) {
			t.Errorf("sentinel leaked: %s", out)
		}
	}
	if b, _ := s.MarshalJSON(); strings.Contains(string(b), sentinel) {
		t.Errorf("MarshalJSON leaked: %s", b)
	}
	if s.Reveal() != sentinel || s.Len() != len(sentinel) {
		t.Error("Reveal or Len wrong")
	}
}

func TestCheckAdoption(t *testing.T) {
	cases := []struct {
		name  string
		found Marks
		want  Adoption
	}{
		{"ours", Marks{Managed: true, UID: "u", Installation: "i"}, Adopt},
		{"ours, uid not yet written", Marks{Managed: true, Installation: "i"}, Adopt},
		{"unmarked", Marks{UID: "u", Installation: "i"}, RefuseUnmarked},
		{"other installation", Marks{Managed: true, UID: "u", Installation: "j"}, RefuseForeignInstallation},
		{"other proxy", Marks{Managed: true, UID: "v", Installation: "i"}, RefuseOtherUID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckAdoption(tc.found, "i", "u")
			if got != tc.want {
				t.Fatalf("CheckAdoption = %v, want %v", got, tc.want)
			}
			err := AdoptionError(got, "proxy-x")
			if (err == nil) != (tc.want == Adopt) {
				t.Fatalf("AdoptionError = %v", err)
			}
			if err != nil && !errors.Is(err, ErrPermanent) {
				t.Errorf("refusal not Permanent: %v", err)
			}
		})
	}
}

func TestMarksRoundTrip(t *testing.T) {
	m := Marks{Managed: true, UID: "u", Installation: "i"}
	if got := MarksFromLabels(m.Labels()); got != m {
		t.Errorf("round trip = %+v", got)
	}
	if MarksFromLabels(map[string]string{MarkManaged: "yes"}).Managed {
		t.Error(`"yes" accepted as the managed value`)
	}
}
