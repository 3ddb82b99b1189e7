package fakecompute

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// The list filter, as the API documents it on every list request (the
// Filter field of computepb.AggregatedListInstancesRequest):
//
//   - AIP-160 comparisons `field = "v"`, `field != v`, `labels.k:*` (the key
//     is defined), combined by AND, OR (which binds tighter than AND, as in
//     AIP-160) or by juxtaposition of parenthesised expressions (AND);
//   - the regular-expression form `field eq "re"`, `field ne re`: RE2,
//     matching the whole field, alone or as juxtaposed parenthesised
//     expressions (no AND/OR).
//
// The two forms cannot be mixed. Anything else, including a field the
// resource does not have, is answered as the API does:
// 400 "Invalid value for field 'filter': '<f>'. Invalid list filter
// expression." (seen in public gcloud logs of firewall-rules list).
//
// Values compare as strings; a field that is absent reads "" (so `!=` and
// `ne` match it).

// fieldGetter reads a field of one resource: its value, whether it is set,
// and whether the resource has such a field at all.
type fieldGetter func(field string) (value string, set, known bool)

type filterNode interface {
	eval(get fieldGetter) bool
}

type andNode []filterNode
type orNode []filterNode

type cmpNode struct {
	field, op, value string
	re               *regexp.Regexp
}

func (n andNode) eval(get fieldGetter) bool {
	for _, c := range n {
		if !c.eval(get) {
			return false
		}
	}
	return true
}

func (n orNode) eval(get fieldGetter) bool {
	for _, c := range n {
		if c.eval(get) {
			return true
		}
	}
	return false
}

func (n *cmpNode) eval(get fieldGetter) bool {
	v, set, _ := get(n.field)
	switch n.op {
	case "=":
		return set && v == n.value
	case "!=":
		return !set || v != n.value
	case ":":
		if n.value == "*" {
			return set
		}
		return set && v == n.value
	case "eq":
		return n.re.MatchString(v)
	case "ne":
		return !n.re.MatchString(v)
	}
	return false
}

// filter is a parsed filter; a nil *filter matches everything.
type filter struct {
	root   filterNode
	fields []string
}

func (f *filter) match(get fieldGetter) bool {
	return f == nil || f.root.eval(get)
}

// check reports whether every field the filter names is one the resource
// kind has (probed on one getter).
func (f *filter) check(get fieldGetter) bool {
	if f == nil {
		return true
	}
	for _, fl := range f.fields {
		if _, _, known := get(fl); !known {
			return false
		}
	}
	return true
}

func invalidFilter(expr string) *APIError {
	return Invalid("filter", expr, "Invalid list filter expression.")
}

// parseFilter parses expr; "" is no filter.
func parseFilter(expr string) (*filter, *APIError) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	toks, err := lexFilter(expr)
	if err != nil {
		return nil, invalidFilter(expr)
	}
	p := &filterParser{toks: toks}
	root, err := p.parseAnd()
	if err != nil || p.pos != len(p.toks) || (p.regex && p.aip) || (p.regex && p.logical) {
		return nil, invalidFilter(expr)
	}
	return &filter{root: root, fields: p.fields}, nil
}

type token struct {
	kind string // "(", ")", "word", "str", "op"
	text string
}

func lexFilter(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := rune(s[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '(' || c == ')':
			toks = append(toks, token{kind: string(c)})
			i++
		case c == '!' && i+1 < len(s) && s[i+1] == '=':
			toks = append(toks, token{kind: "op", text: "!="})
			i += 2
		case c == '=' || c == ':':
			toks = append(toks, token{kind: "op", text: string(c)})
			i++
		case c == '<' || c == '>':
			return nil, fmt.Errorf("unsupported operator at %d", i)
		case c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && rune(s[j]) != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string")
			}
			toks = append(toks, token{kind: "str", text: b.String()})
			i = j + 1
		default:
			j := i
			for j < len(s) && !unicode.IsSpace(rune(s[j])) && !strings.ContainsRune("()=:!<>\"'", rune(s[j])) {
				j++
			}
			toks = append(toks, token{kind: "word", text: s[i:j]})
			i = j
		}
	}
	return toks, nil
}

type filterParser struct {
	toks    []token
	pos     int
	fields  []string
	regex   bool // the eq/ne form was used
	aip     bool // the =, !=, : form was used
	logical bool // AND/OR were written
}

func (p *filterParser) peek() *token {
	if p.pos < len(p.toks) {
		return &p.toks[p.pos]
	}
	return nil
}

func (p *filterParser) parseAnd() (filterNode, error) {
	var parts andNode
	for {
		n, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		parts = append(parts, n)
		t := p.peek()
		if t == nil || t.kind == ")" {
			break
		}
		if t.kind == "word" && t.text == "AND" {
			p.logical = true
			p.pos++
		}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return parts, nil
}

func (p *filterParser) parseOr() (filterNode, error) {
	var parts orNode
	for {
		n, err := p.parseTerm()
		if err != nil {
			return nil, err
		}
		parts = append(parts, n)
		t := p.peek()
		if t == nil || t.kind != "word" || t.text != "OR" {
			break
		}
		p.logical = true
		p.pos++
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return parts, nil
}

func (p *filterParser) parseTerm() (filterNode, error) {
	t := p.peek()
	if t == nil {
		return nil, fmt.Errorf("expression expected")
	}
	if t.kind == "(" {
		p.pos++
		n, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		if c := p.peek(); c == nil || c.kind != ")" {
			return nil, fmt.Errorf(") expected")
		}
		p.pos++
		return n, nil
	}
	if t.kind != "word" || t.text == "AND" || t.text == "OR" {
		return nil, fmt.Errorf("field expected")
	}
	field := t.text
	p.pos++
	op := p.peek()
	if op == nil {
		return nil, fmt.Errorf("operator expected")
	}
	n := &cmpNode{field: field}
	switch {
	case op.kind == "op":
		n.op = op.text
		p.aip = true
	case op.kind == "word" && (op.text == "eq" || op.text == "ne"):
		n.op = op.text
		p.regex = true
	default:
		return nil, fmt.Errorf("operator expected")
	}
	p.pos++
	v := p.peek()
	if v == nil || (v.kind != "word" && v.kind != "str") {
		return nil, fmt.Errorf("value expected")
	}
	p.pos++
	n.value = v.text
	if n.op == "eq" || n.op == "ne" {
		re, err := regexp.Compile("^(?:" + n.value + ")$")
		if err != nil {
			return nil, err
		}
		n.re = re
	}
	p.fields = append(p.fields, field)
	return n, nil
}
