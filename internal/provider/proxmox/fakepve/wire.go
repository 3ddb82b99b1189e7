package fakepve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The wire side. pve-http-server (AnyEvent.pm) writes every answer itself:
// "HTTP/1.1 <code> <first line of the message>", the headers in
// HTTP::Headers' order (general, response, entity), keep-alive only below
// 400, gzip above 1024 bytes for clients that accept it. Go's net/http
// cannot write a custom reason phrase, so ServeHTTP hijacks the connection
// and serves it from then on, reading further requests with
// http.ReadRequest, as pve-http-server does (up to 100 per connection).

const (
	apiBase      = "/api2"
	maxPost      = 64 * 1024 // $limit_max_post: larger non-upload bodies are refused
	keepAliveMax = 100       // pveproxy's keep_alive
	jsonType     = "application/json;charset=UTF-8"
)

// response is one answer before framing.
type response struct {
	status int
	reason string
	body   []byte // nil: no content (and no Content-Type)
	ctype  string
}

func errorResponse(e *Error) response {
	r := response{status: e.Status, reason: e.Reason()}
	if e.Bare {
		return r
	}
	o := obj{{"data", nil}}
	if len(e.Errors) > 0 {
		o = append(o, field{"errors", e.Errors})
	}
	o = append(o, field{"message", e.Message})
	r.body, r.ctype = encodeJSON(o), jsonType
	return r
}

func dataResponse(data any, total *int) response {
	o := obj{}
	if total != nil {
		o = append(o, field{"total", *total})
	}
	o = append(o, field{"data", data})
	return response{status: http.StatusOK, reason: "OK", body: encodeJSON(o), ctype: jsonType}
}

// frame writes the response as pve-http-server does.
func frame(w io.Writer, proto string, r response, keepAlive, gzipOK bool, now time.Time) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d %s\r\n", proto, r.status, r.reason)
	date := now.UTC().Format(http.TimeFormat)
	b.WriteString("Cache-Control: max-age=0\r\n")
	if keepAlive {
		b.WriteString("Connection: Keep-Alive\r\n")
	} else {
		b.WriteString("Connection: close\r\n")
	}
	fmt.Fprintf(&b, "Date: %s\r\nPragma: no-cache\r\nServer: pve-api-daemon/3.0\r\n", date)
	body := r.body
	if len(body) > 0 {
		if gzipOK && len(body) > 1024 {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			_, _ = zw.Write(body)
			_ = zw.Close()
			body = z.Bytes()
			b.WriteString("Content-Encoding: gzip\r\n")
		}
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
		if r.ctype != "" {
			fmt.Fprintf(&b, "Content-Type: %s\r\n", r.ctype)
		}
	}
	fmt.Fprintf(&b, "Expires: %s\r\n\r\n", date)
	b.Write(body)
	_, err := w.Write(b.Bytes())
	return err
}

// ServeHTTP takes the connection over and serves it to its end. Use Start,
// which wraps the fake in an httptest TLS server; ServeHTTP is exported
// only to make the Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	chunked := len(r.TransferEncoding) > 0
	var body []byte
	if !chunked {
		body, _ = io.ReadAll(io.LimitReader(r.Body, 256<<20))
	} else {
		// Refused below, but read first: a client still writing its chunks
		// when the 501 closes the connection gets a broken pipe instead of
		// the answer (seen in CI), and a close with unread bytes is a reset.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "fakepve needs a connection it can hijack (HTTP/1.1)", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	if !s.track(conn) {
		conn.Close()
		return
	}
	defer s.untrack(conn)
	defer conn.Close()

	left := keepAliveMax
	for {
		left--
		keep := s.serveOne(conn, brw, r, body, chunked, left > 0)
		if err := brw.Flush(); err != nil || !keep {
			return
		}
		r, err = http.ReadRequest(brw.Reader)
		if err != nil {
			return
		}
		chunked = len(r.TransferEncoding) > 0
		body = nil
		if !chunked {
			body, err = io.ReadAll(io.LimitReader(r.Body, 256<<20))
			if err != nil {
				return
			}
		}
	}
}

// serveOne answers one request on the hijacked connection and says whether
// the connection stays open.
func (s *Server) serveOne(conn net.Conn, brw *bufio.ReadWriter, r *http.Request, body []byte, chunked, mayKeep bool) bool {
	keep := mayKeep && keepAliveWanted(r)
	gz := strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
	resp, drop := s.answer(r, body, chunked)
	if drop {
		return false // pve-http-server sends nothing (see answer)
	}
	if resp.status >= 400 {
		keep = false
	}
	if resp.status == http.StatusOK && isUploadPath(r) {
		keep = false // an upload always closes ($reqstate->{keep_alive} = 0)
	}
	s.mu.Lock()
	now := s.now()
	s.mu.Unlock()
	if err := frame(brw, r.Proto, resp, keep, gz, now); err != nil {
		return false
	}
	return keep
}

func keepAliveWanted(r *http.Request) bool {
	if c := r.Header.Get("Connection"); c != "" {
		return !strings.Contains(strings.ToLower(c), "close")
	}
	return r.ProtoAtLeast(1, 1)
}

var knownMethods = map[string]bool{"GET": true, "POST": true, "PUT": true, "DELETE": true}

// request is what the handlers see of one call.
type request struct {
	method string
	rel    string // the path below /api2/json, e.g. /nodes/pve1/qemu/101/config
	query  url.Values
	params map[string]string // body and query, query winning, as extract_params merges them
	arrays map[string][]item // the same for array values: repeated keys, JSON arrays
	keys   []string          // form keys for the log, sorted
	upload *upload
	authID string // user@realm!tokenid
}

// upload is the file part of a multipart upload.
type upload struct {
	filename string
	data     []byte
}

// answer runs pve-http-server's request path up to the API handler: method,
// transfer encoding, authentication, body rules, then the handler.
// drop is true where PVE closes the connection without an answer.
func (s *Server) answer(r *http.Request, body []byte, chunked bool) (resp response, drop bool) {
	entry := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query()}
	defer func() {
		entry.Status = resp.status
		if drop {
			entry.Status = 0
		}
		s.log.Add(entry)
	}()

	if !knownMethods[r.Method] {
		return errorResponse(serverError(http.StatusNotImplemented, fmt.Sprintf("method '%s' not available", r.Method))), false
	}
	if chunked {
		return errorResponse(serverError(http.StatusNotImplemented, "chunked transfer encoding not supported")), false
	}
	path := r.URL.Path
	if !strings.HasPrefix(path, apiBase) {
		return errorResponse(serverError(http.StatusNotImplemented, fmt.Sprintf("no such file '%s'", path))), false
	}
	format, rel, ok := splitAPIPath(path)
	if !ok {
		return errorResponse(serverError(http.StatusNotImplemented, "no such uri")), false
	}

	authID, aerr := s.authenticate(r)
	entry.TokenID = authID
	if aerr != nil {
		return errorResponse(aerr), false
	}
	req := &request{method: r.Method, rel: rel, query: r.URL.Query(), authID: authID}

	if r.Method == http.MethodPost && isUploadRel(rel) {
		// The upload's permission is checked while authenticating, so a
		// refusal is bare (HTTPServer.pm auth_handler, $isUpload).
		if e := s.uploadAuthCheck(req); e != nil {
			return errorResponse(e), false
		}
		ct, ps, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if ct != "multipart/form-data" || ps["boundary"] == "" || len(body) == 0 {
			// AnyEvent.pm dies "upload 'Content-Type ...' not implemented"
			// inside an eval that only warns: the client gets no answer.
			return response{}, true
		}
		params, up, perr := parseMultipart(body, ps["boundary"])
		if perr != nil {
			return errorResponse(serverError(http.StatusNotImplemented, "upload failed\n")), false
		}
		req.params, req.arrays, req.upload = params, map[string][]item{}, up
		mergeQuery(req, r.URL.Query())
		entry.Upload = &UploadInfo{Filename: up.filename, Size: len(up.data)}
	} else {
		if len(body) > 0 && r.Method != http.MethodPost && r.Method != http.MethodPut {
			return errorResponse(serverError(http.StatusNotImplemented, fmt.Sprintf("Unexpected content for method '%s'", r.Method))), false
		}
		if len(body) > maxPost {
			return errorResponse(serverError(http.StatusNotImplemented, "for data too large")), false
		}
		params, arrays, perr := parseBody(r.Header.Get("Content-Type"), body)
		if perr != nil {
			return errorResponse(perr), false
		}
		req.params, req.arrays = params, arrays
		mergeQuery(req, r.URL.Query())
	}
	delete(req.params, "_dc")
	delete(req.arrays, "_dc")
	for k := range req.params {
		req.keys = append(req.keys, k)
	}
	for k := range req.arrays {
		req.keys = append(req.keys, k)
	}
	sort.Strings(req.keys)
	entry.FormKeys = req.keys

	if format != "json" {
		return errorResponse(serverError(http.StatusNotImplemented, fmt.Sprintf("no formatter for uri %s, %s", rel, format))), false
	}
	data, total, herr := s.handle(req)
	if herr != nil {
		return errorResponse(herr), false
	}
	return dataResponse(data, total), false
}

// splitAPIPath splits /api2/<format>/<rel> as AnyEvent.pm's $split_abs_uri.
func splitAPIPath(path string) (format, rel string, ok bool) {
	rest := strings.TrimLeft(strings.TrimPrefix(path, apiBase), "/")
	if rest == "" || strings.TrimPrefix(path, apiBase) == rest {
		return "", "", false
	}
	format, rel, _ = strings.Cut(rest, "/")
	if format == "" || !isFormatName(format) {
		return "", "", false
	}
	rel = "/" + rel
	if len(rel) > 1 {
		rel = strings.TrimRight(rel, "/")
	}
	return format, rel, true
}

func isFormatName(s string) bool {
	if s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return len(s) >= 2
}

func isUploadPath(r *http.Request) bool {
	_, rel, ok := splitAPIPath(r.URL.Path)
	return ok && r.Method == http.MethodPost && isUploadRel(rel)
}

func isUploadRel(rel string) bool {
	p := strings.Split(strings.Trim(rel, "/"), "/")
	return len(p) == 5 && p[0] == "nodes" && p[2] == "storage" && p[4] == "upload"
}

// parseBody decodes a form or JSON body as extract_params does: a key
// repeated in a form, or a JSON array, is an array (decode_urlencoded
// since pve-http-server "use proper arrays for array parameter"). Any
// other content type is pve-http-server's 506.
func parseBody(ctype string, body []byte) (map[string]string, map[string][]item, *Error) {
	params, arrays := map[string]string{}, map[string][]item{}
	if len(body) == 0 {
		return params, arrays, nil
	}
	ct, _, _ := mime.ParseMediaType(ctype)
	switch ct {
	case "", "application/x-www-form-urlencoded":
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, nil, serverError(http.StatusBadRequest, "Bad Request")
		}
		for k, v := range vals {
			setValues(params, arrays, k, v)
		}
	case "application/json":
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, nil, die("malformed JSON string, at character offset 0 (before \"%s\")\n", truncate(string(body), 20))
		}
		for k, v := range m {
			switch x := v.(type) {
			case string:
				params[k] = x
			case bool:
				params[k] = map[bool]string{true: "1", false: "0"}[x]
			case float64:
				params[k] = strconv.FormatFloat(x, 'f', -1, 64)
			case nil:
			case []any:
				a := make([]item, len(x))
				for i, el := range x {
					a[i] = jsonItem(el)
				}
				arrays[k] = a
			default:
				b, _ := json.Marshal(x)
				params[k] = string(b)
			}
		}
	default:
		return nil, nil, serverError(506, fmt.Sprintf("upload 'Content-Type '%s' not implemented", ctype))
	}
	return params, arrays, nil
}

// setValues stores key k's values as decode_urlencoded leaves them: one
// a scalar, more an array.
func setValues(params map[string]string, arrays map[string][]item, k string, v []string) {
	delete(params, k)
	delete(arrays, k)
	if len(v) == 1 {
		params[k] = v[0]
	} else {
		arrays[k] = items(v)
	}
}

// mergeQuery adds the query's parameters, which win over the body's
// (extract_params).
func mergeQuery(req *request, q url.Values) {
	for k, v := range q {
		setValues(req.params, req.arrays, k, v)
	}
}

// jsonItem is one element of a JSON array as decode_json gives it to Perl.
func jsonItem(el any) item {
	switch x := el.(type) {
	case string:
		return item{v: x}
	case float64:
		return item{v: strconv.FormatFloat(x, 'f', -1, 64)}
	case bool:
		return item{ref: "JSON::PP::Boolean"}
	case []any:
		return item{ref: "ARRAY"}
	case map[string]any:
		return item{ref: "HASH"}
	}
	return item{undef: true}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// parseMultipart reads an upload as file_upload_multipart does: form
// fields become parameters; the one file part must be named "filename" and
// its file name becomes the "filename" parameter.
func parseMultipart(body []byte, boundary string) (map[string]string, *upload, error) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	params := map[string]string{}
	var up *upload
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return nil, nil, err
		}
		// The file name as sent (Part.FileName would cut its directories).
		_, disp, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		if fn := disp["filename"]; fn != "" {
			if p.FormName() != "filename" {
				return nil, nil, fmt.Errorf("wrong field name for file upload")
			}
			up = &upload{filename: fn, data: data}
			params["filename"] = fn
			continue
		}
		if p.FormName() == "" {
			return nil, nil, fmt.Errorf("wrong content disposition")
		}
		params[p.FormName()] = string(data)
	}
	if up == nil {
		return nil, nil, fmt.Errorf("no file part")
	}
	return params, up, nil
}
