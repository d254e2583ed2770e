package serving_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/serving"
)

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// TestRequestLog checks the request ID (the client's, else a new one per
// request) and the access log line of every request.
func TestRequestLog(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	var logs syncBuffer
	srv := serving.New(e.reg, slog.New(slog.NewJSONHandler(&logs, nil)), serving.Options{})
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})

	ids := map[string]bool{}
	for range 3 {
		w := post(srv, predictURL, body)
		id := w.Header().Get("X-Request-Id")
		if w.Code != http.StatusOK || id == "" || ids[id] {
			t.Fatalf("got %d with X-Request-Id %q, want 200 and a new ID (have %v)", w.Code, id, ids)
		}
		ids[id] = true
	}
	r, _ := http.NewRequest(http.MethodGet, "/v1/models/nosuch", nil)
	r.Header.Set("X-Request-Id", "client-7")
	w := recorder(srv, r)
	if got := w.Header().Get("X-Request-Id"); got != "client-7" {
		t.Errorf("X-Request-Id: got %q, want the client's \"client-7\"", got)
	}

	var lines []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "request" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("got %d access log lines, want 4:\n%s", len(lines), logs.String())
	}
	last := lines[3]
	for k, want := range map[string]any{"component": "serving", "method": "GET", "uri": "/v1/models/nosuch", "status": 404.0, "request_id": "client-7"} {
		if last[k] != want {
			t.Errorf("log %s: got %v, want %v", k, last[k], want)
		}
	}
	if ms, ok := last["latency_ms"].(float64); !ok || ms < 0 {
		t.Errorf("log latency_ms: got %v, want a duration", last["latency_ms"])
	}
	if lines[0]["request_id"] == lines[1]["request_id"] {
		t.Errorf("two requests logged with request_id %v", lines[0]["request_id"])
	}
}

// TestContentEncoding covers what gzip on either side must and must not
// do.
func TestContentEncoding(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{BodyLimit: 10_000}, 0)
	body := []byte(mustJSON(t, map[string]any{"instances": f.instances[:20]}))
	big := []byte(mustJSON(t, map[string]any{"instances": f.instances}))
	for _, tc := range []struct {
		name           string
		target         string
		method         string
		encoding       string
		accept         string
		body           []byte
		want           int
		wantCompressed bool
		wantMsg        string
	}{
		{name: "gzip both ways", encoding: "gzip", accept: "gzip, deflate", body: gzipped(t, body), want: 200, wantCompressed: true},
		{name: "upper-case coding", encoding: "GZIP", accept: "GZIP", body: gzipped(t, body), want: 200, wantCompressed: true},
		{name: "gzip refused by q=0", accept: "deflate, gzip;q=0", body: body, want: 200},
		{name: "no Accept-Encoding", body: body, want: 200},
		{name: "identity", encoding: "identity", body: body, want: 200},
		{name: "not gzip", encoding: "gzip", body: body, want: 400, wantMsg: "not gzip"},
		{name: "truncated gzip", encoding: "gzip", body: gzipped(t, body)[:60], want: 400, wantMsg: "read request body"},
		{name: "empty gzip body", encoding: "gzip", body: nil, want: 400, wantMsg: "empty"},
		{name: "unknown coding", encoding: "br", body: body, want: 415, wantMsg: `"br"`},
		{name: "limit on the decompressed size", encoding: "gzip", body: gzipped(t, big), want: 413, wantMsg: "larger than 10000 bytes"},
		{name: "metrics compressed once", method: http.MethodGet, target: "/metrics", accept: "gzip", want: 200, wantCompressed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.encoding == "gzip" && tc.want == 413 && len(tc.body) > 10_000 {
				t.Fatalf("compressed body of %d bytes is over the limit itself", len(tc.body))
			}
			method, target := tc.method, tc.target
			if method == "" {
				method, target = http.MethodPost, predictURL
			}
			var rd io.Reader
			if tc.body != nil {
				rd = bytes.NewReader(tc.body)
			}
			r, _ := http.NewRequest(method, target, rd)
			if method == http.MethodPost {
				r.Header.Set("Content-Type", "application/json")
			}
			if tc.encoding != "" {
				r.Header.Set("Content-Encoding", tc.encoding)
			}
			if tc.accept != "" {
				r.Header.Set("Accept-Encoding", tc.accept)
			}
			w := recorder(e.srv, r)
			if w.Code != tc.want {
				t.Fatalf("status: got %d (%s), want %d", w.Code, clip(w.Body.Bytes()), tc.want)
			}
			if v := w.Header().Get("Vary"); v != "Accept-Encoding" {
				t.Errorf("Vary: got %q, want Accept-Encoding", v)
			}
			if tc.wantMsg != "" {
				if msg := errorMessage(t, w); !strings.Contains(msg, tc.wantMsg) {
					t.Errorf("error: got %q, want it to contain %q", msg, tc.wantMsg)
				}
				return
			}
			got := w.Body.Bytes()
			if compressed := w.Header().Get("Content-Encoding") == "gzip"; compressed != tc.wantCompressed {
				t.Fatalf("Content-Encoding: got %q, want compressed %v", w.Header().Get("Content-Encoding"), tc.wantCompressed)
			}
			if tc.wantCompressed {
				zr, err := gzip.NewReader(bytes.NewReader(got))
				if err != nil {
					t.Fatal(err)
				}
				if got, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if target == "/metrics" {
				if !bytes.Contains(got, []byte("trainflow_serving_requests_total")) {
					t.Errorf("metrics: got %q, want the text format", clip(got))
				}
				return
			}
			var resp predictResponse
			if err := json.Unmarshal(got, &resp); err != nil || len(resp.Predictions) != 20 {
				t.Errorf("body: got %q (%v), want 20 predictions", clip(got), err)
			}
		})
	}
}
