package fakepve

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Parameter verification as pve-common JSONSchema.pm does it: for each
// property of the method's schema, in this order, a missing non-optional
// value, the type (integer /^[+-]?\d+$/, boolean only "0" or "1"), the
// format, the pattern (anchored), maxLength, minLength, minimum and
// maximum, the enumeration; then every parameter the schema does not define
// (additionalProperties => 0). All errors are collected, one per
// parameter, into the 400's errors map. A format error is "invalid format -
// " and the format's die text, its trailing newline included.
//
// Arrays: since pve-http-server "use proper arrays for array parameter"
// (2023-06, PVE 8.0) a key repeated in a form or query is an array, as is
// a JSON array; RESTHandler.pm's normalize_legacy_param_formats then joins
// an array given for a "-list" string with "," and makes a scalar given
// for an array parameter an array of one (unless Perl calls it false: ""
// or "0"). check_type says "type check ('array') failed" of a scalar left
// where an array belongs, "type check ('<type>') failed - got ARRAY" of an
// array where a scalar belongs, and check_prop checks each element against
// items, naming it "<name>[<i>]".

type ptype int

const (
	tString ptype = iota
	tInteger
	tBoolean
	tNumber
	tArray
)

func (t ptype) String() string {
	return [...]string{"string", "integer", "boolean", "number", "array"}[t]
}

type pspec struct {
	typ      ptype
	optional bool
	format   string
	pattern  *regexp.Regexp
	maxLen   int
	min, max *float64
	enum     []string
	items    *pspec // tArray: each element's schema
}

type schema map[string]pspec

func fptr(f float64) *float64 { return &f }

// Building blocks, named after pve-common's standard options.
var (
	pNode      = pspec{typ: tString, format: "pve-node"}
	pVMID      = pspec{typ: tInteger, format: "pve-vmid", min: fptr(100), max: fptr(999999999)}
	pStorage   = pspec{typ: tString, format: "pve-storage-id"}
	pBool      = pspec{typ: tBoolean, optional: true}
	pString    = pspec{typ: tString, optional: true}
	pSkiplock  = pBool
	pDigest    = pspec{typ: tString, optional: true, maxLen: 40}
	pTimeout   = pspec{typ: tInteger, optional: true, min: fptr(0)}
	pUPID      = pspec{typ: tString}
	pOptString = pString
)

func (p pspec) opt() pspec { p.optional = true; return p }

// item is one element of an array parameter as Perl holds it: a scalar
// v, or (from a JSON array) a reference, ref naming what ref() says of it
// ("ARRAY", "HASH", "JSON::PP::Boolean"), or undef (a JSON null).
type item struct {
	v     string
	ref   string
	undef bool
}

func items(vs []string) []item {
	out := make([]item, len(vs))
	for i, v := range vs {
		out[i] = item{v: v}
	}
	return out
}

// normalize is RESTHandler.pm normalize_legacy_param_formats, on the
// top level: an array given for a "-list" string joined with ",", a
// scalar that Perl calls true given for an array made an array of one.
func (sc schema) normalize(params map[string]string, arrays map[string][]item) {
	for name, a := range arrays {
		if spec, ok := sc[name]; ok && spec.typ == tString && strings.HasSuffix(spec.format, "-list") {
			vs := make([]string, len(a))
			for i, it := range a {
				vs[i] = it.v
			}
			params[name] = strings.Join(vs, ",")
			delete(arrays, name)
		}
	}
	for name, v := range params {
		if spec, ok := sc[name]; ok && spec.typ == tArray && v != "" && v != "0" {
			arrays[name] = []item{{v: v}}
			delete(params, name)
		}
	}
}

func (sc schema) validate(params map[string]string, arrays map[string][]item) map[string]string {
	errs := map[string]string{}
	for name, spec := range sc {
		if a, ok := arrays[name]; ok {
			if spec.typ != tArray {
				errs[name] = fmt.Sprintf("type check ('%s') failed - got ARRAY", spec.typ)
				continue
			}
			for i, it := range a {
				if msg := checkItem(*spec.items, it); msg != "" {
					errs[fmt.Sprintf("%s[%d]", name, i)] = msg
				}
			}
			continue
		}
		v, ok := params[name]
		if !ok {
			if !spec.optional {
				errs[name] = "property is missing and it is not optional"
			}
			continue
		}
		if spec.typ == tArray {
			errs[name] = "type check ('array') failed"
			continue
		}
		if msg := checkProp(name, spec, v); msg != "" {
			errs[name] = msg
		}
	}
	for _, m := range []map[string]bool{keySet(params), keySet(arrays)} {
		for name := range m {
			if _, ok := sc[name]; !ok {
				errs[name] = "property is not defined in schema and the schema does not allow additional properties"
			}
		}
	}
	return errs
}

// checkItem is check_prop of one array element (items are never optional).
func checkItem(spec pspec, it item) string {
	switch {
	case it.undef:
		return "property is missing and it is not optional"
	case it.ref == "JSON::PP::Boolean" && spec.typ == tBoolean:
		return ""
	case it.ref != "":
		return fmt.Sprintf("type check ('%s') failed - got %s", spec.typ, it.ref)
	}
	return checkProp("", spec, it.v)
}

func keySet[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

var (
	reInteger = regexp.MustCompile(`^[+-]?\d+$`)
	reNumber  = regexp.MustCompile(`^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$`)
)

func checkProp(name string, spec pspec, v string) string {
	switch spec.typ {
	case tInteger:
		if !reInteger.MatchString(v) {
			return fmt.Sprintf("type check ('integer') failed - got '%s'", v)
		}
	case tBoolean:
		if v != "0" && v != "1" {
			return fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
		}
	case tNumber:
		if !reNumber.MatchString(v) {
			return fmt.Sprintf("type check ('number') failed - got '%s'", v)
		}
	}
	if spec.format != "" {
		if msg := checkFormat(name, spec.format, v); msg != "" {
			return "invalid format - " + msg
		}
	}
	if spec.pattern != nil && !spec.pattern.MatchString(v) {
		return "value does not match the regex pattern"
	}
	if spec.maxLen > 0 && len(v) > spec.maxLen {
		return fmt.Sprintf("value may only be %d characters long", spec.maxLen)
	}
	if reNumber.MatchString(v) {
		f, _ := strconv.ParseFloat(v, 64)
		if spec.max != nil && f > *spec.max {
			return fmt.Sprintf("value must have a maximum value of %s", perlFloat(*spec.max))
		}
		if spec.min != nil && f < *spec.min {
			return fmt.Sprintf("value must have a minimum value of %s", perlFloat(*spec.min))
		}
	}
	if len(spec.enum) > 0 {
		for _, e := range spec.enum {
			if e == v {
				return ""
			}
		}
		return fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", v, strings.Join(spec.enum, ", "))
	}
	return ""
}

var (
	reVMIDFormat = regexp.MustCompile(`^[1-9][0-9]{2,8}$`)
	reNodeName   = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`)
	reStorageID  = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-\_\.]*[a-z0-9]$`)
	reDNSName    = regexp.MustCompile(`^(([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`)
	reTag        = regexp.MustCompile(`(?i)^[a-z0-9_][a-z0-9_\-\+\.]*$`)
	reConfigID   = regexp.MustCompile(`^[a-z][a-z0-9_]+$`)
	reMAC        = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)
	reSplitList  = regexp.MustCompile(`[ ,;]+`)
)

// checkFormat returns the format's die text ("" when it passes). Sources:
// pve-common JSONSchema.pm (pve-vmid, pve-node, pve-storage-id via
// parse_id, dns-name, pve-tag, pve-configid) and the property-string
// formats of qemu-server (memory, agent, net, drives).
func checkFormat(name, format, v string) string {
	switch format {
	case "pve-vmid":
		if !reVMIDFormat.MatchString(v) {
			return "value does not look like a valid VM ID\n"
		}
	case "pve-node":
		if !reNodeName.MatchString(v) {
			return "value does not look like a valid node name\n"
		}
	case "pve-storage-id":
		if !reStorageID.MatchString(v) {
			return fmt.Sprintf("storage ID '%s' contains illegal characters\n", v)
		}
	case "dns-name":
		if !reDNSName.MatchString(v) {
			return "value does not look like a valid DNS name\n"
		}
	case "pve-tag-list":
		for _, t := range splitList(v) {
			if !reTag.MatchString(t) {
				return "invalid characters in tag\n"
			}
		}
	case "pve-configid-list":
		for _, id := range splitList(v) {
			if !reConfigID.MatchString(id) {
				return fmt.Sprintf("invalid configuration ID '%s'\n", id)
			}
		}
	case "memory":
		return checkPropString(name, v, "current", map[string]pspec{
			"current": {typ: tInteger, min: fptr(16)},
		})
	case "agent":
		return checkPropString(name, v, "enabled", map[string]pspec{
			"enabled":             {typ: tBoolean},
			"fstrim_cloned_disks": {typ: tBoolean, optional: true},
			"freeze-fs-on-backup": {typ: tBoolean, optional: true},
			"guest-fsfreeze":      {typ: tBoolean, optional: true},
			"type":                {typ: tString, optional: true, enum: []string{"virtio", "isa"}},
		})
	case "net":
		return checkNet(name, v)
	case "drive":
		// check_drive_param's own message, not a format error.
		return ""
	}
	return ""
}

func splitList(v string) []string {
	var out []string
	for _, x := range reSplitList.Split(strings.TrimSpace(v), -1) {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// checkPropString is parse_property_string plus check_object: a value
// without a key goes to the default key; an unknown key dies; property
// errors are raised as "format error\n" followed by "<path>.<key>: <msg>\n".
func checkPropString(path, v, defaultKey string, keys map[string]pspec) string {
	got := map[string]string{}
	for _, part := range strings.Split(v, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, val, hasEq := strings.Cut(part, "=")
		if !hasEq {
			if defaultKey == "" {
				return "value without key, but schema does not define a default key\n"
			}
			if _, dup := got[defaultKey]; dup {
				return fmt.Sprintf("duplicate key in comma-separated list property: %s\n", defaultKey)
			}
			val = part
			if keys[defaultKey].typ == tBoolean {
				val = parseBoolean(val)
			}
			got[defaultKey] = val
			continue
		}
		if k == "" || val == "" {
			return "missing key in comma-separated list property\n"
		}
		if _, dup := got[k]; dup {
			return fmt.Sprintf("duplicate key in comma-separated list property: %s\n", k)
		}
		spec, ok := keys[k]
		if !ok {
			return fmt.Sprintf("invalid key in comma-separated list property: %s\n", k)
		}
		if spec.typ == tBoolean {
			val = parseBoolean(val)
		}
		got[k] = val
	}
	var lines []string
	for k, spec := range keys {
		val, ok := got[k]
		if !ok {
			if !spec.optional {
				lines = append(lines, fmt.Sprintf("%s.%s: property is missing and it is not optional", path, k))
			}
			continue
		}
		if msg := checkProp(k, spec, val); msg != "" {
			lines = append(lines, fmt.Sprintf("%s.%s: %s", path, k, msg))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	sortStrings(lines)
	return "format error\n" + strings.Join(lines, "\n") + "\n"
}

// parseBoolean is JSONSchema.pm parse_boolean: 1|true|on|yes and
// 0|false|off|no, anything else unchanged.
func parseBoolean(v string) string {
	switch strings.ToLower(v) {
	case "1", "true", "on", "yes":
		return "1"
	case "0", "false", "off", "no":
		return "0"
	}
	return v
}

var netModels = map[string]bool{"virtio": true, "e1000": true, "e1000e": true, "rtl8139": true,
	"vmxnet3": true, "i82551": true, "i82557b": true, "i82559er": true, "ne2k_isa": true, "ne2k_pci": true, "pcnet": true}

// checkNet checks a netN value: "<model>[=<mac>]" or model=..., then
// bridge, tag (1..4094), firewall, link_down, mtu, queues, rate, trunks,
// macaddr (qemu-server QemuServer/Network.pm $net_fmt).
func checkNet(path, v string) string {
	keys := map[string]pspec{
		"model":     {typ: tString, enum: sortedKeys(netModels)},
		"macaddr":   {typ: tString, optional: true},
		"bridge":    {typ: tString, optional: true},
		"tag":       {typ: tInteger, optional: true, min: fptr(1), max: fptr(4094)},
		"trunks":    {typ: tString, optional: true},
		"firewall":  {typ: tBoolean, optional: true},
		"link_down": {typ: tBoolean, optional: true},
		"mtu":       {typ: tInteger, optional: true, min: fptr(1), max: fptr(65520)},
		"queues":    {typ: tInteger, optional: true, min: fptr(0), max: fptr(64)},
		"rate":      {typ: tNumber, optional: true, min: fptr(0)},
	}
	var parts []string
	for _, part := range strings.Split(v, ",") {
		k, val, hasEq := strings.Cut(part, "=")
		if netModels[k] {
			// the model as key alias: virtio=BC:24:11:..
			if hasEq && !reMAC.MatchString(val) {
				return fmt.Sprintf("format error\n%s.macaddr: value does not look like a valid unicast MAC address\n", path)
			}
			parts = append(parts, "model="+k)
			if hasEq {
				parts = append(parts, "macaddr="+val)
			}
			continue
		}
		parts = append(parts, part)
	}
	return checkPropString(path, strings.Join(parts, ","), "model", keys)
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}
