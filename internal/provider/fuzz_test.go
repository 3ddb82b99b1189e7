package provider

import (
	"errors"
	"testing"
)

// FuzzMarks reads arbitrary label values as marks and judges adoption:
// never a panic; "managed" only for the exact value; marks rendered as
// labels read back the same; and CheckAdoption adopts exactly when the
// contract says (managed, this installation, the request's UID or none),
// with AdoptionError nil exactly then.
func FuzzMarks(f *testing.F) {
	f.Fuzz(func(t *testing.T, managed, uid, installation, wantInstallation, wantUID string) {
		l := map[string]string{MarkManaged: managed, MarkUID: uid, MarkInstallation: installation, "other": managed}
		m := MarksFromLabels(l)
		if m.Managed != (managed == MarkManagedValue) || m.UID != uid || m.Installation != installation {
			t.Fatalf("MarksFromLabels(%q) = %+v", l, m)
		}
		if back := MarksFromLabels(m.Labels()); back != m {
			t.Fatalf("marks %+v rendered as %q read back as %+v", m, m.Labels(), back)
		}
		if _, ok := (Marks{UID: uid, Installation: installation}).Labels()[MarkManaged]; ok {
			t.Fatalf("unmanaged marks render the managed label")
		}
		a := CheckAdoption(m, wantInstallation, wantUID)
		adopt := m.Managed && m.Installation == wantInstallation && (m.UID == "" || m.UID == wantUID)
		if (a == Adopt) != adopt {
			t.Fatalf("CheckAdoption(%+v, %q, %q) = %d, want adopt=%v", m, wantInstallation, wantUID, a, adopt)
		}
		if err := AdoptionError(a, "x"); (err == nil) != adopt {
			t.Fatalf("AdoptionError(%d) = %v, want nil=%v", a, err, adopt)
		}
		if err := AdoptionError(a, "x"); err != nil && !errors.Is(err, ErrPermanent) {
			t.Fatalf("AdoptionError(%d) = %v, not Permanent", a, err)
		}
	})
}
