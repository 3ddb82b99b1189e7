// Package otelcol lets tests read back, from a real OpenTelemetry Collector,
// the spans a process exported over OTLP/HTTP: Start runs the collector
// built by hack/tools/otelcol (the otlp receiver and the file exporter) on
// 127.0.0.1, Parse reads the file exporter's OTLP JSON (a file, or the
// e2e collector's log), and the trace helpers (ByTrace, Roots, Children,
// Ancestors, Tree, SpansWith) are what checks on the spans' shape need.
package otelcol

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/codes"
)

// Span is one span as the collector received it.
type Span struct {
	// IDs in lowercase hex, as OTLP JSON carries them; ParentSpanID is ""
	// for a trace's root.
	TraceID, SpanID, ParentSpanID string
	Name                          string
	// Start and End are Unix nanoseconds.
	Start, End int64
	// Service is the resource's service.name.
	Service string
	Attrs   map[string]string
	Events  []Event
	Links   []Link
	// Status is in OTel Go's codes (whose numbers differ from OTLP's).
	Status        codes.Code
	StatusMessage string
}

// Event is a span event, such as the "exception" RecordError adds.
type Event struct {
	Name  string
	Attrs map[string]string
}

// Link points at a span, usually of another trace.
type Link struct {
	TraceID, SpanID string
}

// The OTLP JSON of one export request (the protobuf JSON mapping: IDs in
// hex, 64-bit integers as strings, enums as numbers or names), only the
// fields read here.
type otlpExport struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []otlpKeyValue `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Spans []otlpSpan `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

type otlpSpan struct {
	TraceID      string         `json:"traceId"`
	SpanID       string         `json:"spanId"`
	ParentSpanID string         `json:"parentSpanId"`
	Name         string         `json:"name"`
	Start        json.Number    `json:"startTimeUnixNano"`
	End          json.Number    `json:"endTimeUnixNano"`
	Attributes   []otlpKeyValue `json:"attributes"`
	Events       []struct {
		Name       string         `json:"name"`
		Attributes []otlpKeyValue `json:"attributes"`
	} `json:"events"`
	Links []struct {
		TraceID string `json:"traceId"`
		SpanID  string `json:"spanId"`
	} `json:"links"`
	Status struct {
		Code    otlpStatusCode `json:"code"`
		Message string         `json:"message"`
	} `json:"status"`
}

type otlpKeyValue struct {
	Key   string       `json:"key"`
	Value otlpAnyValue `json:"value"`
}

type otlpAnyValue struct {
	StringValue *string      `json:"stringValue"`
	IntValue    *json.Number `json:"intValue"`
	BoolValue   *bool        `json:"boolValue"`
	DoubleValue *float64     `json:"doubleValue"`
	BytesValue  *string      `json:"bytesValue"`
	ArrayValue  *struct {
		Values []otlpAnyValue `json:"values"`
	} `json:"arrayValue"`
	KvlistValue *struct {
		Values []otlpKeyValue `json:"values"`
	} `json:"kvlistValue"`
}

// String renders a value as one string: arrays as [a, b], maps as
// {k=v, ...}, bytes decoded, so that SpansWith finds a string wherever in
// a value it is.
func (v otlpAnyValue) String() string {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.IntValue != nil:
		return v.IntValue.String()
	case v.BoolValue != nil:
		return strconv.FormatBool(*v.BoolValue)
	case v.DoubleValue != nil:
		return fmt.Sprint(*v.DoubleValue)
	case v.BytesValue != nil:
		if b, err := base64.StdEncoding.DecodeString(*v.BytesValue); err == nil {
			return string(b)
		}
		return *v.BytesValue
	case v.ArrayValue != nil:
		parts := make([]string, len(v.ArrayValue.Values))
		for i, e := range v.ArrayValue.Values {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case v.KvlistValue != nil:
		parts := make([]string, len(v.KvlistValue.Values))
		for i, kv := range v.KvlistValue.Values {
			parts[i] = kv.Key + "=" + kv.Value.String()
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return ""
}

func attrMap(kvs []otlpKeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// otlpStatusCode is OTLP's status code, which the collector writes as a
// number and the protobuf JSON mapping also allows by name.
type otlpStatusCode codes.Code

func (c *otlpStatusCode) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	// OTLP: 0 unset, 1 ok, 2 error; OTel Go's codes number them otherwise.
	switch v {
	case nil, 0.0, "STATUS_CODE_UNSET":
		*c = otlpStatusCode(codes.Unset)
	case 1.0, "STATUS_CODE_OK":
		*c = otlpStatusCode(codes.Ok)
	case 2.0, "STATUS_CODE_ERROR":
		*c = otlpStatusCode(codes.Error)
	default:
		return fmt.Errorf("status code %s: not an OTLP status code", b)
	}
	return nil
}

func nanos(field string, n json.Number) (int64, error) {
	if n == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", field, n, err)
	}
	return v, nil
}

// Parse reads the file exporter's output: each line starting with '{' is
// one OTLP JSON export request; other lines (the collector's own log, when
// both streams are read together, as kubectl logs does) are skipped.
func Parse(out string) ([]Span, error) {
	var spans []Span
	for n, line := range strings.Split(out, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e otlpExport
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("line %d of the collector's output: %w", n+1, err)
		}
		for _, rs := range e.ResourceSpans {
			service := attrMap(rs.Resource.Attributes)["service.name"]
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					span, err := convert(s, service)
					if err != nil {
						return nil, fmt.Errorf("line %d of the collector's output, span %q (%s): %w", n+1, s.Name, s.SpanID, err)
					}
					spans = append(spans, span)
				}
			}
		}
	}
	return spans, nil
}

func convert(s otlpSpan, service string) (Span, error) {
	start, err := nanos("startTimeUnixNano", s.Start)
	if err != nil {
		return Span{}, err
	}
	end, err := nanos("endTimeUnixNano", s.End)
	if err != nil {
		return Span{}, err
	}
	span := Span{
		TraceID: s.TraceID, SpanID: s.SpanID, ParentSpanID: s.ParentSpanID, Name: s.Name,
		Start: start, End: end, Service: service, Attrs: attrMap(s.Attributes),
		Status: codes.Code(s.Status.Code), StatusMessage: s.Status.Message,
	}
	for _, e := range s.Events {
		span.Events = append(span.Events, Event{Name: e.Name, Attrs: attrMap(e.Attributes)})
	}
	for _, l := range s.Links {
		span.Links = append(span.Links, Link{TraceID: l.TraceID, SpanID: l.SpanID})
	}
	return span, nil
}
