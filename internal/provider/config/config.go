// Package config decodes the providers config file: a YAML list of
// {name, type, <type>: {...}, autoheal: {...}} entries. Decoding is strict (an unknown field is
// an error) and every error names its path, e.g.
// "providers[1].local.bindCIDR: Invalid value: ...". The per-type block is
// decoded by the type's own package through Strict, so this package names no
// backend.
package config

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/egress-proxies-operator/egress-proxies-operator/internal/provider/ippool"
)

// Entry is one provider entry with its type block still undecoded.
type Entry struct {
	Name string
	Type string
	// Settings is the <type> block as JSON, or nil when the entry has none.
	Settings json.RawMessage
	// Autoheal is the entry's autoheal block, defaults applied.
	Autoheal Autoheal
	// AddressPool is the entry's addressPool block, validated; nil when it
	// has none. Whether its type takes one is the registry's to say.
	AddressPool *ippool.Spec
	// Path is the entry's place in the file, for error messages.
	Path *field.Path
}

// Autoheal is how the reconciler replaces an entry's instances whose
// proxy stopped answering (docs/api.md, ProxyNotAnswering).
type Autoheal struct {
	// ReplaceUnhealthyAfter is how long a proxy may not answer, after it
	// answered, before its instance is replaced; 0 turns autoheal off.
	ReplaceUnhealthyAfter *metav1.Duration `json:"replaceUnhealthyAfter,omitempty"`
	// MaxConcurrent bounds the Proxies of the entry being autohealed at
	// once, so an outage of the whole backend does not replace the fleet.
	MaxConcurrent *int32 `json:"maxConcurrent,omitempty"`
}

// Autoheal defaults: five minutes outlasts a Squid restart or reload and
// a network blip, and is shorter than a person noticing (Cluster API's
// MachineHealthCheck examples use 5 minutes too); three at once lets
// independent failures heal without queueing while an outage replaces at
// most three instances.
const (
	DefaultReplaceUnhealthyAfter = 5 * time.Minute
	DefaultAutohealMaxConcurrent = 3
	maxReplaceUnhealthyAfter     = 24 * time.Hour
)

// After is ReplaceUnhealthyAfter with its default; 0: off.
func (a Autoheal) After() time.Duration {
	if a.ReplaceUnhealthyAfter == nil {
		return DefaultReplaceUnhealthyAfter
	}
	return a.ReplaceUnhealthyAfter.Duration
}

// Max is MaxConcurrent with its default.
func (a Autoheal) Max() int {
	if a.MaxConcurrent == nil {
		return DefaultAutohealMaxConcurrent
	}
	return int(*a.MaxConcurrent)
}

func (a Autoheal) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if d := a.ReplaceUnhealthyAfter; d != nil && (d.Duration < 0 || d.Duration > maxReplaceUnhealthyAfter) {
		errs = append(errs, field.Invalid(p.Child("replaceUnhealthyAfter"), d.Duration.String(),
			"must be 0 (off) or a duration up to 24h, e.g. 5m"))
	}
	if m := a.MaxConcurrent; m != nil && (*m < 1 || *m > 1000) {
		errs = append(errs, field.Invalid(p.Child("maxConcurrent"), *m, "must be 1-1000; turn autoheal off with replaceUnhealthyAfter: 0"))
	}
	return errs
}

// SettingsPath is the path of the entry's type block.
func (e Entry) SettingsPath() *field.Path { return e.Path.Child(e.Type) }

// Parse decodes the file's top level: each entry's name must be a unique
// DNS-1123 label, its type one of types (the registry's constructor map,
// nothing else), and the only other key the block named after the type.
func Parse(data []byte, types []string) ([]Entry, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, fmt.Errorf("the file must be a mapping with a top-level %q list", "providers")
	}
	var errs field.ErrorList
	for _, k := range SortedKeys(top) {
		if k != "providers" {
			errs = append(errs, unknownField(field.NewPath(k)))
		}
	}
	root := field.NewPath("providers")
	var raws []map[string]json.RawMessage
	if err := json.Unmarshal(top["providers"], &raws); err != nil {
		errs = append(errs, field.Invalid(root, "", "must be a list of {name, type, <type>: {...}, autoheal: {...}} entries"))
		return nil, errs.ToAggregate()
	}
	allowed := map[string]bool{}
	for _, t := range types {
		allowed[t] = true
	}
	seen := map[string]int{}
	entries := make([]Entry, 0, len(raws))
	for i, raw := range raws {
		p := root.Index(i)
		e := Entry{Path: p}
		if raw == nil {
			errs = append(errs, field.Required(p, "an entry must be a mapping"))
			continue
		}
		if err := json.Unmarshal(raw["name"], &e.Name); err != nil || e.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), "a DNS-1123 label naming the provider"))
		} else if msgs := validation.IsDNS1123Label(e.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("name"), e.Name, strings.Join(msgs, "; ")))
		} else if j, dup := seen[e.Name]; dup {
			errs = append(errs, field.Duplicate(p.Child("name"), fmt.Sprintf("%s (also providers[%d])", e.Name, j)))
		} else {
			seen[e.Name] = i
		}
		if err := json.Unmarshal(raw["type"], &e.Type); err != nil || e.Type == "" {
			errs = append(errs, field.Required(p.Child("type"), "one of: "+strings.Join(sortedTypes(types), ", ")))
		} else if !allowed[e.Type] {
			errs = append(errs, field.NotSupported(p.Child("type"), e.Type, sortedTypes(types)))
		}
		for _, k := range SortedKeys(raw) {
			switch {
			case k == "name" || k == "type":
			case k == "autoheal":
				if fe := Strict(raw[k], &e.Autoheal, p.Child(k)); len(fe) > 0 {
					errs = append(errs, fe...)
				} else {
					errs = append(errs, e.Autoheal.validate(p.Child(k))...)
				}
			case k == "addressPool":
				pool := &ippool.Spec{}
				if fe := Strict(raw[k], pool, p.Child(k)); len(fe) > 0 {
					errs = append(errs, fe...)
				} else if fe := pool.Validate(p.Child(k)); len(fe) > 0 {
					errs = append(errs, fe...)
				} else {
					e.AddressPool = pool
				}
			case k == e.Type:
				if !bytes.Equal(bytes.TrimSpace(raw[k]), []byte("null")) {
					e.Settings = raw[k]
				}
			default:
				errs = append(errs, unknownField(p.Child(k)))
			}
		}
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return entries, nil
}

// Strict decodes a type block into out (a pointer to the type's config
// struct), rejecting unknown fields anywhere below path and naming the path
// of every error. Nil raw leaves out as it is.
func Strict(raw json.RawMessage, out any, path *field.Path) field.ErrorList {
	if len(raw) == 0 {
		return nil
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return field.ErrorList{field.Invalid(path, "", "not valid: "+err.Error())}
	}
	errs := checkShape(generic, reflect.TypeOf(out), path)
	if len(errs) > 0 {
		return errs
	}
	if err := json.Unmarshal(raw, out); err != nil {
		// Only what checkShape cannot see is left here (an overflow, or a
		// type that decodes itself).
		errs = append(errs, field.Invalid(path, "", err.Error()))
	}
	return errs
}

var (
	jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

// checkShape walks a decoded JSON value alongside the Go type it will be
// decoded into and reports every key the type has no field for and every
// value of the wrong kind, each with its full path (encoding/json's own
// errors lose list indices).
func checkShape(v any, t reflect.Type, path *field.Path) field.ErrorList {
	if v == nil || t.Kind() == reflect.Interface {
		return nil
	}
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil // the type decodes itself and reports its own errors
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var errs field.ErrorList
	switch val := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			for _, k := range SortedKeys(val) {
				ft, ok := fields[k]
				if !ok {
					errs = append(errs, unknownField(path.Child(k)))
					continue
				}
				errs = append(errs, checkShape(val[k], ft, path.Child(k))...)
			}
		case reflect.Map:
			for _, k := range SortedKeys(val) {
				errs = append(errs, checkShape(val[k], t.Elem(), path.Key(k))...)
			}
		default:
			errs = append(errs, kindError(path, "a mapping", t))
		}
	case []any:
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return field.ErrorList{kindError(path, "a list", t)}
		}
		for i, item := range val {
			errs = append(errs, checkShape(item, t.Elem(), path.Index(i))...)
		}
	case string:
		if t.Kind() != reflect.String {
			errs = append(errs, field.TypeInvalid(path, val, "expected "+describe(t)))
		}
	case bool:
		if t.Kind() != reflect.Bool {
			errs = append(errs, field.TypeInvalid(path, val, "expected "+describe(t)))
		}
	case float64:
		switch t.Kind() {
		case reflect.Float32, reflect.Float64:
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if val != float64(int64(val)) {
				errs = append(errs, field.TypeInvalid(path, val, "expected a whole number"))
			}
		default:
			errs = append(errs, field.TypeInvalid(path, val, "expected "+describe(t)))
		}
	}
	return errs
}

func kindError(path *field.Path, got string, t reflect.Type) *field.Error {
	return field.TypeInvalid(path, got, "expected "+describe(t))
}

// describe names a Go type the way a YAML author thinks of it.
func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	default:
		return t.String()
	}
}

// jsonFields maps the JSON names of a struct's fields to their types,
// following embedded structs without a name as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func unknownField(p *field.Path) *field.Error {
	return field.Forbidden(p, "unknown field")
}

// SortedKeys are m's keys in order: for messages that list the choices,
// and for deterministic iteration.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// OnlyKey is m's key when it has exactly one, else "": a catalogue's
// default when the config names none.
func OnlyKey[V any](m map[string]V) string {
	if len(m) != 1 {
		return ""
	}
	for k := range m {
		return k
	}
	return ""
}

func sortedTypes(types []string) []string {
	s := append([]string(nil), types...)
	sort.Strings(s)
	return s
}

// Settings is what a provider type's config block implements.
type Settings[C any] interface {
	*C
	// Default fills the fields left unset.
	Default()
	// Validate checks the filled-in block; errors are under path.
	Validate(path *field.Path) field.ErrorList
}

// Decode is the one way a type block is read: strict decoding, then the
// type's defaults, then its validation. Nil raw gives the defaults.
func Decode[C any, P Settings[C]](raw json.RawMessage, path *field.Path) (C, field.ErrorList) {
	var c C
	if errs := Strict(raw, &c, path); len(errs) > 0 {
		return c, errs
	}
	P(&c).Default()
	if errs := P(&c).Validate(path); len(errs) > 0 {
		return c, errs
	}
	return c, nil
}
