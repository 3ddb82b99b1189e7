package otelcol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
)

// exportLine is one export request as the file exporter writes it, with
// the given spans under a resource named service.
func exportLine(t *testing.T, service string, spans ...map[string]any) string {
	t.Helper()
	line, err := json.Marshal(map[string]any{"resourceSpans": []any{map[string]any{
		"resource": map[string]any{"attributes": []any{
			map[string]any{"key": "service.name", "value": map[string]any{"stringValue": service}}}},
		"scopeSpans": []any{map[string]any{"scope": map[string]any{"name": "test"}, "spans": spans}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(line)
}

func kv(key string, value map[string]any) map[string]any {
	return map[string]any{"key": key, "value": value}
}

// collectorLog is a line of the collector's own log, which Parse skips.
const collectorLog = "2026-12-01T18:00:00.000Z\tinfo\tservice@v0.161.0/service.go:1\tEverything is ready. {\"resource\": {}}"

func TestParse(t *testing.T) {
	httpPost := map[string]any{
		"traceId": "aa", "spanId": "bb", "parentSpanId": "cc", "name": "HTTP POST",
		"kind": 3, "startTimeUnixNano": "17", "endTimeUnixNano": "19",
		"attributes": []any{
			kv("url.full", map[string]any{"stringValue": "https://x/api/v1/namespaces/n/pods"}),
			kv("http.response.status_code", map[string]any{"intValue": "201"}),
		},
	}
	wantHTTPPost := Span{TraceID: "aa", SpanID: "bb", ParentSpanID: "cc", Name: "HTTP POST", Start: 17, End: 19, Service: "svc",
		Attrs: map[string]string{"url.full": "https://x/api/v1/namespaces/n/pods", "http.response.status_code": "201"}}

	for _, tc := range []struct {
		name    string
		out     func(t *testing.T) string
		want    []Span
		wantErr string // a substring; "" for none
	}{
		{
			// test/e2e reads the collector's stdout and stderr together.
			name: "an export request among the collector's log lines",
			out: func(t *testing.T) string {
				return collectorLog + "\n" + exportLine(t, "svc", httpPost) + "\n" + collectorLog + "\n"
			},
			want: []Span{wantHTTPPost},
		},
		{
			name: "CRLF line ends, no final newline",
			out: func(t *testing.T) string {
				return collectorLog + "\r\n" + exportLine(t, "svc", httpPost) + "\r\n" + exportLine(t, "svc", httpPost)
			},
			want: []Span{wantHTTPPost, wantHTTPPost},
		},
		{
			name: "each span gets its own request's service.name",
			out: func(t *testing.T) string {
				return exportLine(t, "one", map[string]any{"traceId": "t", "spanId": "1", "name": "a"}) + "\n" +
					exportLine(t, "two", map[string]any{"traceId": "t", "spanId": "2", "parentSpanId": "1", "name": "b"})
			},
			want: []Span{
				{TraceID: "t", SpanID: "1", Name: "a", Service: "one", Attrs: map[string]string{}},
				{TraceID: "t", SpanID: "2", ParentSpanID: "1", Name: "b", Service: "two", Attrs: map[string]string{}},
			},
		},
		{
			name: "every attribute value type as one string",
			out: func(t *testing.T) string {
				return exportLine(t, "svc", map[string]any{"traceId": "t", "spanId": "1", "name": "a",
					// The protobuf JSON mapping allows int64 as a number too.
					"startTimeUnixNano": 1700000000000000001, "endTimeUnixNano": "1700000000000000002",
					"attributes": []any{
						kv("s", map[string]any{"stringValue": "x"}),
						kv("i", map[string]any{"intValue": "-3"}),
						kv("inum", map[string]any{"intValue": 4}),
						kv("b", map[string]any{"boolValue": true}),
						kv("d", map[string]any{"doubleValue": 1.5}),
						kv("bytes", map[string]any{"bytesValue": "aGVsbG8="}),
						kv("arr", map[string]any{"arrayValue": map[string]any{"values": []any{
							map[string]any{"stringValue": "x"}, map[string]any{"intValue": "3"}}}}),
						kv("kvl", map[string]any{"kvlistValue": map[string]any{"values": []any{
							kv("k", map[string]any{"boolValue": false})}}}),
						kv("empty", map[string]any{}),
					}})
			},
			want: []Span{{TraceID: "t", SpanID: "1", Name: "a", Service: "svc",
				Start: 1700000000000000001, End: 1700000000000000002,
				Attrs: map[string]string{"s": "x", "i": "-3", "inum": "4", "b": "true", "d": "1.5", "bytes": "hello",
					"arr": "[x, 3]", "kvl": "{k=false}", "empty": ""}}},
		},
		{
			name: "events, links and status, as the collector writes them",
			out: func(t *testing.T) string {
				return exportLine(t, "svc", map[string]any{"traceId": "t2", "spanId": "2", "name": "a",
					"events": []any{map[string]any{"timeUnixNano": "18", "name": "exception",
						"attributes": []any{kv("exception.message", map[string]any{"stringValue": "boom"})}}},
					"links":  []any{map[string]any{"traceId": "t1", "spanId": "1", "attributes": []any{}}},
					"status": map[string]any{"message": "bad", "code": 2},
				})
			},
			want: []Span{{TraceID: "t2", SpanID: "2", Name: "a", Service: "svc", Attrs: map[string]string{},
				Events: []Event{{Name: "exception", Attrs: map[string]string{"exception.message": "boom"}}},
				Links:  []Link{{TraceID: "t1", SpanID: "1"}},
				Status: codes.Error, StatusMessage: "bad"}},
		},
		{
			// OTLP numbers ok 1 and error 2, OTel Go the other way round.
			name: "status codes by number and by name",
			out: func(t *testing.T) string {
				return exportLine(t, "svc",
					map[string]any{"spanId": "1", "status": map[string]any{"code": 1}},
					map[string]any{"spanId": "2", "status": map[string]any{"code": "STATUS_CODE_OK"}},
					map[string]any{"spanId": "3", "status": map[string]any{"code": "STATUS_CODE_ERROR"}},
					map[string]any{"spanId": "4", "status": map[string]any{}},
					map[string]any{"spanId": "5", "status": map[string]any{"code": 0}},
				)
			},
			want: []Span{
				{SpanID: "1", Service: "svc", Attrs: map[string]string{}, Status: codes.Ok},
				{SpanID: "2", Service: "svc", Attrs: map[string]string{}, Status: codes.Ok},
				{SpanID: "3", Service: "svc", Attrs: map[string]string{}, Status: codes.Error},
				{SpanID: "4", Service: "svc", Attrs: map[string]string{}, Status: codes.Unset},
				{SpanID: "5", Service: "svc", Attrs: map[string]string{}, Status: codes.Unset},
			},
		},
		{
			name: "nothing but log lines",
			out:  func(*testing.T) string { return collectorLog + "\n\n  {indented: not a request}\n" },
		},
		{
			name:    "a broken JSON line",
			out:     func(*testing.T) string { return collectorLog + "\n{not json\n" },
			wantErr: "line 2 of the collector's output",
		},
		{
			name: "a time that is no integer",
			out: func(t *testing.T) string {
				return exportLine(t, "svc", map[string]any{"spanId": "1", "name": "a", "startTimeUnixNano": "1.5"})
			},
			wantErr: `span "a" (1): startTimeUnixNano "1.5"`,
		},
		{
			name: "an unknown status code",
			out: func(t *testing.T) string {
				return exportLine(t, "svc", map[string]any{"spanId": "1", "status": map[string]any{"code": 7}})
			},
			wantErr: "not an OTLP status code",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.out(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
