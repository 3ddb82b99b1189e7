package fakepve

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// The fake writes its JSON itself, so the bytes are what pve-http-server's
// Perl encoder writes (to_json with utf8 and allow_nonref, not canonical):
// compact, `/` and non-ASCII left as they are, only `"`, `\` and control
// characters escaped, numbers as Perl prints them (%.15g for floats). Perl's
// hash order is random per process, so no client can rely on key order; the
// fake keeps one fixed order per object, the fixtures' where they show one.

// obj is a JSON object whose keys keep their insertion order.
type obj []field

type field struct {
	k string
	v any
}

// set appends k, or replaces its value where k is already there.
func (o *obj) set(k string, v any) {
	for i := range *o {
		if (*o)[i].k == k {
			(*o)[i].v = v
			return
		}
	}
	*o = append(*o, field{k, v})
}

// num is a number written as given (an integer count or a Perl "$x + 0").
type num string

func encodeJSON(v any) []byte {
	var b bytes.Buffer
	writeJSON(&b, v)
	return b.Bytes()
}

func writeJSON(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(perlFloat(x))
	case num:
		b.WriteString(string(x))
	case string:
		writeJSONString(b, x)
	case obj:
		b.WriteByte('{')
		for i, f := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, f.k)
			b.WriteByte(':')
			writeJSON(b, f.v)
		}
		b.WriteByte('}')
	case map[string]string: // errors maps; Perl's order is random, sorted here
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		o := make(obj, 0, len(keys))
		for _, k := range keys {
			o = append(o, field{k, x[k]})
		}
		writeJSON(b, o)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e)
		}
		b.WriteByte(']')
	case []obj:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e)
		}
		b.WriteByte(']')
	case []string:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, e)
		}
		b.WriteByte(']')
	default:
		panic(fmt.Sprintf("fakepve: no JSON form for %T", v))
	}
}

// perlFloat is Perl's number to string conversion (%.15g), which JSON::XS
// uses for NV values: 0.0249060195469461, 1e-05, 2.5.
func perlFloat(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "null"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 15, 64)
}

// writeJSONString escapes as JSON::XS does with utf8: `"`, `\`, \b \f \n \r
// \t and other control characters as \u00xx; everything else, `/` and
// non-ASCII included, is copied.
func writeJSONString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 {
					fmt.Fprintf(b, `\u%04x`, c)
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString(`\ufffd`)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}
