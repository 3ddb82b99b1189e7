package provider

// The marks every instance carries, in the backend's own form (labels,
// a libvirt metadata element, Proxmox description lines). The keys are
// valid Kubernetes label keys and GCE label keys alike.
const (
	// MarkManaged says the operator made the instance; its value is "true".
	MarkManaged = "proxy-operator-managed"
	// MarkUID holds the owning Proxy's UID.
	MarkUID = "proxy-operator-uid"
	// MarkInstallation holds the installation identity, so that two
	// operators sharing a backend never list, adopt or collect each other's
	// instances.
	MarkInstallation = "proxy-operator-installation"
	// MarkManagedValue is MarkManaged's value.
	MarkManagedValue = "true"
)

// Marks is the parsed form of an instance's marks.
type Marks struct {
	Managed      bool
	UID          string
	Installation string
}

// Labels renders the marks as a label map.
func (m Marks) Labels() map[string]string {
	l := map[string]string{MarkUID: m.UID, MarkInstallation: m.Installation}
	if m.Managed {
		l[MarkManaged] = MarkManagedValue
	}
	return l
}

// MarksFromLabels parses a label map; absent keys give zero values.
func MarksFromLabels(l map[string]string) Marks {
	return Marks{Managed: l[MarkManaged] == MarkManagedValue, UID: l[MarkUID], Installation: l[MarkInstallation]}
}

// Adoption is the verdict on an existing instance found under a request's
// name.
type Adoption int

const (
	// Adopt: ours, same installation, same or empty UID.
	Adopt Adoption = iota
	// RefuseUnmarked: no managed mark: somebody else's instance.
	RefuseUnmarked
	// RefuseForeignInstallation: another operator installation's instance.
	RefuseForeignInstallation
	// RefuseOtherUID: ours but owned by another Proxy.
	RefuseOtherUID
)

// CheckAdoption applies the contract's adoption rule once for every
// provider: only an instance with the managed mark, this installation's
// identity and the request's UID (or an empty UID) is adopted.
func CheckAdoption(found Marks, installation, uid string) Adoption {
	switch {
	case !found.Managed:
		return RefuseUnmarked
	case found.Installation != installation:
		return RefuseForeignInstallation
	case found.UID != "" && found.UID != uid:
		return RefuseOtherUID
	default:
		return Adopt
	}
}

// AdoptionError returns nil for Adopt, else a Permanent error that says why
// the instance named name cannot be adopted.
func AdoptionError(a Adoption, name string) error {
	switch a {
	case RefuseUnmarked:
		return Errorf(ErrPermanent, "instance %q exists but is not managed by this operator; rename or remove it", name)
	case RefuseForeignInstallation:
		return Errorf(ErrPermanent, "instance %q belongs to another operator installation", name)
	case RefuseOtherUID:
		return Errorf(ErrPermanent, "instance %q belongs to another Proxy (UID mismatch)", name)
	default:
		return nil
	}
}
