package serving_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/serving"
)

// bare is the baseline bench/serve measures the server against: decode,
// Transform + predict, encode, and nothing else.
func bare(reg *serving.Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sv, err := reg.Get(model, 0)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		var req struct {
			Instances []map[string]json.RawMessage `json:"instances"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		preds, err := sv.Predict(req.Instances)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"predictions": preds})
	})
}

// sink is a ResponseWriter that keeps the status and discards the body, so
// that a benchmark measures the server, not a recorder.
type sink struct {
	h    http.Header
	code int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) WriteHeader(code int)        { s.code = code }
func (s *sink) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkServe sends one :predict request of batch instances per
// iteration through the whole Echo server (routing, middleware, decoding,
// Transform, model, encoding) and, for comparison, through bare. Requests
// carry Accept-Encoding: gzip as Go clients' do; the gzip cases also
// compress the request body. Compare runs with benchstat over -count=10.
func BenchmarkServe(b *testing.B) {
	f := getFixture(b)
	e := newEnv(b, serving.Options{}, 0)
	for _, tc := range []struct {
		batch int
		gzip  bool
	}{{1, false}, {32, false}, {1, true}, {32, true}} {
		insts := make([]map[string]any, tc.batch)
		for i := range insts {
			insts[i] = f.instances[i%len(f.instances)]
		}
		body := []byte(mustJSON(b, map[string]any{"instances": insts}))
		if tc.gzip {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			zw.Write(body)
			zw.Close()
			body = zb.Bytes()
		}
		for _, srv := range []struct {
			name, target string
			h            http.Handler
		}{{"echo", predictURL, e.srv}, {"bare", "/", bare(e.reg)}} {
			if tc.gzip && srv.name == "bare" {
				continue // bare reads no compressed bodies
			}
			name := fmt.Sprintf("server=%s/batch=%d", srv.name, tc.batch)
			if tc.gzip {
				name += "/gzip"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				rd := bytes.NewReader(body)
				req, err := http.NewRequest(http.MethodPost, srv.target, nil)
				if err != nil {
					b.Fatal(err)
				}
				w := &sink{h: http.Header{}}
				for b.Loop() {
					rd.Reset(body)
					req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
					req.Header = http.Header{"Content-Type": {"application/json"}, "Accept-Encoding": {"gzip"}}
					if tc.gzip {
						req.Header.Set("Content-Encoding", "gzip")
					}
					clear(w.h)
					w.code = 0
					srv.h.ServeHTTP(w, req)
					if w.code != 0 && w.code != http.StatusOK {
						b.Fatalf("status %d", w.code)
					}
				}
			})
		}
	}
}

// BenchmarkServeRouted measures what routing costs a :predict of one
// instance through the whole server: no routing (the default answers),
// a 50/50 split (pick, telemetry, feedback memory), the same split with
// a feedback key (a signed request ID in place of the memory), and a 100% routing
// with a shadow (plus the copy for the shadow queue, or counting it
// dropped when the queue is full; the shadow worker runs beside, resting
// between copies).
func BenchmarkServeRouted(b *testing.B) {
	f := getFixture(b)
	body := []byte(mustJSON(b, map[string]any{"instances": f.instances[:1]}))
	for _, tc := range []struct {
		name string
		rt   rollout.Routing
		key  []byte
	}{
		{"none", rollout.Routing{}, nil},
		{"split", rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 50}, {Version: 2, Percent: 50}}}, nil},
		{"split_signed", rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 50}, {Version: 2, Percent: 50}}}, bytes.Repeat([]byte{1}, 32)},
		{"shadow", rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 100}}, Shadow: 2}, nil},
	} {
		b.Run("routing="+tc.name, func(b *testing.B) {
			e := newEnv(b, serving.Options{FeedbackKey: tc.key}, 0, 1)
			b.Cleanup(e.srv.Close)
			e.route(b, tc.rt)
			b.ReportAllocs()
			rd := bytes.NewReader(body)
			req, err := http.NewRequest(http.MethodPost, predictURL, nil)
			if err != nil {
				b.Fatal(err)
			}
			w := &sink{h: http.Header{}}
			for b.Loop() {
				rd.Reset(body)
				req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
				req.Header = http.Header{"Content-Type": {"application/json"}}
				clear(w.h)
				w.code = 0
				e.srv.ServeHTTP(w, req)
				if w.code != 0 && w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// BenchmarkRoute measures picking a version: Get (no routing) against
// Route under a 50/50 split, at random and by a routing key.
func BenchmarkRoute(b *testing.B) {
	e := newEnv(b, serving.Options{}, 0, 1)
	b.Cleanup(e.srv.Close)
	e.route(b, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 50}, {Version: 2, Percent: 50}}})
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.reg.Get(model, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, key := range []string{"", "user-1234567"} {
		b.Run(fmt.Sprintf("route/key=%t", key != ""), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, err := e.reg.Route(model, key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
