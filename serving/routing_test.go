package serving_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/serving"
)

// route sets model's routing in e's repository and reloads.
func (e *env) route(t testing.TB, rt rollout.Routing) {
	t.Helper()
	if _, err := e.repo.SetRouting(context.Background(), model, rt, bundle.Cause{By: "test"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Reload(); err != nil {
		t.Fatal(err)
	}
}

// predictWith posts one instance to target with headers.
func predictWith(h http.Handler, target, body string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestRoutedSplit routes census 70/30 between two versions: unnamed
// requests split within 4 points of the weights (n = 2000, σ ≈ 1 point)
// and say which version answered, in the header and in V2's
// model_version; a routing key always lands on the same version;
// explicit version and label requests are never split; the telemetry
// counts exactly what each version answered.
func TestRoutedSplit(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	t.Cleanup(e.srv.Close)
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 70}, {Version: 2, Percent: 30}}})
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	const n = 2000
	count := map[string]int{}
	for range n {
		w := post(e.srv, predictURL, body)
		if w.Code != http.StatusOK {
			t.Fatalf("got %d %s", w.Code, w.Body)
		}
		count[w.Header().Get("X-Model-Version")]++
	}
	if share := float64(count["1"]) / n; math.Abs(share-0.7) > 0.04 || count["1"]+count["2"] != n {
		t.Fatalf("got %v of %d answers, want 70%% ± 4 from version 1 and the rest from 2", count, n)
	}
	t.Logf("observed share of version 1 at 70%%: %.1f%%", 100*float64(count["1"])/n)
	for _, key := range []string{"alice", "bob", "carol", "dave"} {
		first := ""
		for i := range 20 {
			v := predictWith(e.srv, predictURL, body, map[string]string{serving.HeaderRoutingKey: key}).Header().Get("X-Model-Version")
			if i == 0 {
				first = v
			} else if v != first {
				t.Fatalf("routing key %q: answered by %s then %s", key, first, v)
			}
		}
	}
	for range 50 {
		if v := post(e.srv, "/v1/models/census/versions/2:predict", body).Header().Get("X-Model-Version"); v != "2" {
			t.Fatalf("explicit version 2: answered by %q", v)
		}
		if v := post(e.srv, "/v1/models/census/versions/1:predict", body).Header().Get("X-Model-Version"); v != "1" {
			t.Fatalf("explicit version 1: answered by %q", v)
		}
	}
	v2 := map[string]int{}
	for range 200 {
		w := post(e.srv, "/v2/models/census/infer", v2Body(t, "r", f.instances[:1]))
		var resp struct {
			ModelVersion string `json:"model_version"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusOK {
			t.Fatalf("v2: got %d %s", w.Code, w.Body)
		}
		if h := w.Header().Get("X-Model-Version"); h != resp.ModelVersion {
			t.Fatalf("v2: header %q, model_version %q", h, resp.ModelVersion)
		}
		v2[resp.ModelVersion]++
	}
	if v2["1"] == 0 || v2["2"] == 0 {
		t.Fatalf("v2 answers by version: got %v, want both", v2)
	}
	tel := e.reg.Telemetry("srv_test", model, time.Now())
	live1, live2 := tel.Versions["1"].Live, tel.Versions["2"].Live
	// Telemetry counts requests in the middleware after the answer: all
	// of them are in by now (ServeHTTP returned).
	if live1.Requests+live2.Requests != n+4*20+100+200 {
		t.Fatalf("telemetry: %d + %d requests, want %d", live1.Requests, live2.Requests, n+4*20+100+200)
	}
	var classes int64
	for _, c := range live1.Classes {
		classes += c
	}
	if classes != live1.Rows || live1.Rows != live1.Requests {
		t.Fatalf("version 1: %d rows, %d class counts, %d requests of one row each", live1.Rows, classes, live1.Requests)
	}
}

// TestRoutedShareWithinTwoPoints sends 30,000 routed requests from 4
// concurrent clients (a steady load) at each of the weights 5/95,
// 25/75 and 50/50, half with a random X-Routing-Key and half with none:
// the share of answers from each version, counted from the
// X-Model-Version headers, is within 2 points of its weight, for the
// keyed half, the unkeyed half and all of them (the rollout issue's
// figure). At n = 15,000 and p = 0.5 one standard deviation is 0.41
// points, so 2 points is 4.9σ (0.29 and 7σ for all 30,000): the bound
// does not flake. The telemetry counts the same answers per version.
func TestRoutedShareWithinTwoPoints(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	t.Cleanup(e.srv.Close)
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	const n, clients = 30000, 4
	rng := rand.New(rand.NewPCG(29, 1))
	keys := make([]string, n/2)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%016x", rng.Uint64())
	}
	before := map[string]int64{}
	for _, p1 := range []int{5, 25, 50} {
		e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: p1}, {Version: 2, Percent: 100 - p1}}})
		// ones[k][v]: answers from version 1 (v 0) or 2 (v 1), keyed (k 1) or not (k 0).
		var mu sync.Mutex
		var ones [2][2]int
		var wg sync.WaitGroup
		errs := make(chan string, clients)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine [2][2]int
				for i := c; i < n; i += clients {
					keyed := i%2 == 1
					hdr := map[string]string{}
					if keyed {
						hdr[serving.HeaderRoutingKey] = keys[i/2]
					}
					w := predictWith(e.srv, predictURL, body, hdr)
					v := w.Header().Get("X-Model-Version")
					if w.Code != http.StatusOK || (v != "1" && v != "2") {
						errs <- fmt.Sprintf("request %d: got %d from version %q", i, w.Code, v)
						return
					}
					k, j := 0, 0
					if keyed {
						k = 1
					}
					if v == "2" {
						j = 1
					}
					mine[k][j]++
				}
				mu.Lock()
				defer mu.Unlock()
				for k := range 2 {
					for j := range 2 {
						ones[k][j] += mine[k][j]
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		want := float64(p1) / 100
		for _, c := range []struct {
			name     string
			from1, n int
		}{
			{"unkeyed", ones[0][0], ones[0][0] + ones[0][1]},
			{"keyed", ones[1][0], ones[1][0] + ones[1][1]},
			{"all", ones[0][0] + ones[1][0], ones[0][0] + ones[0][1] + ones[1][0] + ones[1][1]},
		} {
			share := float64(c.from1) / float64(c.n)
			t.Logf("weights %d/%d, %s: version 1 answered %.2f%% of %d", p1, 100-p1, c.name, 100*share, c.n)
			if math.Abs(share-want) > 0.02 {
				t.Errorf("weights %d/%d, %s: version 1 answered %.2f%% of %d, want %d%% ± 2 points", p1, 100-p1, c.name, 100*share, c.n, p1)
			}
		}
		tel := e.reg.Telemetry("srv_test", model, time.Now())
		for j, v := range []string{"1", "2"} {
			got := tel.Versions[v].Live.Requests - before[v]
			if want := int64(ones[0][j] + ones[1][j]); got != want {
				t.Errorf("weights %d/%d: telemetry counts %d answers of version %s, the headers %d", p1, 100-p1, got, v, want)
			}
			before[v] = tel.Versions[v].Live.Requests
		}
	}
}

// TestShadow shadows version 1's answers with version 2: answers are
// version 1's, unchanged, and version 2's shadow counters see every copy
// (the queue is never full at this pace, and with one request at a time
// a core is always spare) with the agreement the two versions really have
// on these rows. With ShadowMaxLive 1 a copy may start only once its own
// request's answer is done: every copy still runs, so the end of a live
// prediction wakes the waiting worker.
func TestShadow(t *testing.T) {
	for _, maxLive := range []int{0, 1} {
		t.Run(fmt.Sprint("max_live_", maxLive), func(t *testing.T) { testShadow(t, maxLive) })
	}
}

func testShadow(t *testing.T, maxLive int) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{ShadowMaxLive: maxLive}, 0, 1)
	t.Cleanup(e.srv.Close)
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 100}}, Shadow: 2})
	agree := 0
	for i, inst := range f.instances {
		body := mustJSON(t, map[string]any{"instances": []any{inst}})
		w := post(e.srv, predictURL, body)
		if v := w.Header().Get("X-Model-Version"); w.Code != http.StatusOK || v != "1" {
			t.Fatalf("instance %d: got %d from version %q, want 200 from 1", i, w.Code, v)
		}
		got := decodePredictions(t, w)
		want1 := decodePredictions(t, post(e.srv, "/v1/models/census/versions/1:predict", body))
		want2 := decodePredictions(t, post(e.srv, "/v1/models/census/versions/2:predict", body))
		if got[0].Class != want1[0].Class || got[0].Probabilities[0] != want1[0].Probabilities[0] {
			t.Fatalf("instance %d: the shadowed answer %v differs from version 1's %v", i, got[0], want1[0])
		}
		if want1[0].Class == want2[0].Class {
			agree++
		}
	}
	n := int64(len(f.instances))
	deadline := time.Now().Add(10 * time.Second)
	var sh rollout.Stats
	for {
		sh = e.reg.Telemetry("srv_test", model, time.Now()).Versions["2"].Shadow
		if sh.Requests == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // polling a counter the shadow worker raises
	}
	if sh.Requests != n || sh.Compared != n || sh.Agreed != int64(agree) || sh.Errors != 0 {
		t.Fatalf("shadow counters: got %+v, want %d requests compared with %d agreeing", sh, n, agree)
	}
	t.Logf("shadow agreement of version 2 with 1: %d/%d", agree, n)
}

// TestShadowV2 shadows KServe V2 infer requests as TestShadow does v1
// :predict: the answers are version 1's, unchanged, and version 2's
// shadow counters see every copy, decoded as V2 (a copy read as v1 would
// count an error and no comparison), with the agreement the two versions
// really have on these rows. A request that names its version is never
// shadowed.
func TestShadowV2(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	t.Cleanup(e.srv.Close)
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 100}}, Shadow: 2})
	type v2Answer struct {
		ModelVersion string `json:"model_version"`
		Outputs      []struct {
			Name string `json:"name"`
			Data []any  `json:"data"`
		} `json:"outputs"`
	}
	class := func(w *httptest.ResponseRecorder) (string, any) {
		t.Helper()
		var a v2Answer
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || w.Code != http.StatusOK {
			t.Fatalf("v2: got %d %s", w.Code, w.Body)
		}
		for _, o := range a.Outputs {
			if o.Name == "class" && len(o.Data) == 1 {
				return a.ModelVersion, o.Data[0]
			}
		}
		t.Fatalf("v2 answer without one class: %s", w.Body)
		return "", nil
	}
	agree := 0
	for i, inst := range f.instances {
		body := v2Body(t, fmt.Sprint("r", i), []map[string]any{inst})
		v, got := class(post(e.srv, "/v2/models/census/infer", body))
		_, want1 := class(post(e.srv, "/v2/models/census/versions/1/infer", body))
		_, want2 := class(post(e.srv, "/v2/models/census/versions/2/infer", body))
		if v != "1" || got != want1 {
			t.Fatalf("instance %d: the shadowed answer %v from version %q differs from version 1's %v", i, got, v, want1)
		}
		if want1 == want2 {
			agree++
		}
	}
	n := int64(len(f.instances))
	deadline := time.Now().Add(10 * time.Second)
	var sh rollout.Stats
	for {
		sh = e.reg.Telemetry("srv_test", model, time.Now()).Versions["2"].Shadow
		if sh.Requests == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // polling a counter the shadow worker raises
	}
	if sh.Requests != n || sh.Compared != n || sh.Agreed != int64(agree) || sh.Errors != 0 {
		t.Fatalf("V2 shadow counters: got %+v, want %d requests compared with %d agreeing", sh, n, agree)
	}
	t.Logf("V2 shadow agreement of version 2 with 1: %d/%d", agree, n)
}

// TestShadowSampled copies a quarter of the routed requests: the copies
// the shadow answered and those it dropped (at this pace most are: the
// worker takes at most 2% of a core) are 25% ± 5 of 1000 (σ ≈ 1.4
// points).
func TestShadowSampled(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	t.Cleanup(e.srv.Close)
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 100}}, Shadow: 2, ShadowPercent: 25})
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	const n = 1000
	for range n {
		post(e.srv, predictURL, body)
	}
	// The worker drains the queue, a copy every millisecond or more (its
	// rest grows with the copy's time: under -race, tens of
	// milliseconds); every copy is answered or dropped once none is
	// pending.
	deadline := time.Now().Add(60 * time.Second)
	for serving.ShadowPending(e.srv) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d shadow copies still pending after 60 s", serving.ShadowPending(e.srv))
		}
		time.Sleep(10 * time.Millisecond) // polling a counter the shadow worker lowers
	}
	sh := e.reg.Telemetry("srv_test", model, time.Now()).Versions["2"].Shadow
	busy, full := shadowDropped(t, e)
	if share := float64(sh.Requests+busy+full) / n; share < 0.20 || share > 0.30 {
		t.Fatalf("shadow copies: got %d answered, %d + %d dropped of %d, want 25%% ± 5", sh.Requests, busy, full, n)
	}
	t.Logf("copies: %d answered, %d dropped as busy, %d as queue_full", sh.Requests, busy, full)
}

// shadowDropped reads trainflow_serving_shadow_dropped_total of e's
// server by reason.
func shadowDropped(t *testing.T, e *env) (busy, queueFull int64) {
	t.Helper()
	m := serve(e.srv, http.MethodGet, "/metrics", "", nil).Body.String()
	for _, c := range []struct {
		reason string
		n      *int64
	}{{"busy", &busy}, {"queue_full", &queueFull}} {
		prefix := fmt.Sprintf("\ntrainflow_serving_shadow_dropped_total{reason=%q} ", c.reason)
		i := strings.Index(m, prefix)
		if i < 0 {
			t.Fatalf("metrics: no %s", strings.TrimSpace(prefix))
		}
		line, _, _ := strings.Cut(m[i+len(prefix):], "\n")
		if _, err := fmt.Sscan(line, c.n); err != nil {
			t.Fatalf("metrics: %s%s: %v", strings.TrimSpace(prefix), line, err)
		}
	}
	return busy, queueFull
}

// TestFeedback gives the true label of routed predictions: a right one
// and a wrong one count in the answering version's online accuracy; a
// request ID given twice, unknown, or of another model is a 404; a body
// without request_id or label is a 400 naming the field.
func TestFeedback(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	t.Cleanup(e.srv.Close)
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 50}, {Version: 2, Percent: 50}}})
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	type answer struct {
		id, version, class string
	}
	var as []answer
	for range 2 {
		w := post(e.srv, predictURL, body)
		id := w.Header().Get("X-Request-Id")
		if id == "" {
			t.Fatal("no X-Request-Id on a prediction")
		}
		as = append(as, answer{id, w.Header().Get("X-Model-Version"), decodePredictions(t, w)[0].Class})
	}
	other := func(c string) string {
		for _, v := range f.transform.LabelVocab {
			if v != c {
				return v
			}
		}
		return ""
	}
	fb := "/v1/models/census/feedback"
	for i, tc := range []struct {
		body     string
		code     int
		contains string
	}{
		{mustJSON(t, map[string]any{"request_id": as[0].id, "label": as[0].class}), 200, `"correct":true`},
		{mustJSON(t, map[string]any{"request_id": as[1].id, "label": other(as[1].class)}), 200, `"correct":false`},
		{mustJSON(t, map[string]any{"request_id": as[0].id, "label": as[0].class}), 404, "not a recent routed prediction"},
		{mustJSON(t, map[string]any{"request_id": "nosuch", "label": "x"}), 404, "not a recent"},
		{`{"label": "x"}`, 400, "request_id"},
		{mustJSON(t, map[string]any{"request_id": "x"}), 400, "label"},
		{`{"request_id": "x", "label": "y", "extra": 1}`, 400, "extra"},
	} {
		w := post(e.srv, fb, tc.body)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.contains) {
			t.Fatalf("case %d %s: got %d %s, want %d with %q", i, tc.body, w.Code, w.Body, tc.code, tc.contains)
		}
	}
	tel := e.reg.Telemetry("srv_test", model, time.Now())
	var labelled, correct int64
	for _, vs := range tel.Versions {
		labelled += vs.Live.Labelled
		correct += vs.Live.Correct
	}
	if labelled != 2 || correct != 1 {
		t.Fatalf("feedback counters: %d labelled, %d correct; want 2 and 1", labelled, correct)
	}
	if a := tel.Versions[as[0].version].Live; a.Correct < 1 {
		t.Fatalf("version %s answered the right one: got %+v", as[0].version, a)
	}
}

// TestRoutingToUnloadedServesDefault writes a routing.json naming a
// version that is not in the repository: the server logs it and the
// default answers everything.
func TestRoutingToUnloadedServesDefault(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	t.Cleanup(e.srv.Close)
	raw := `{"weights":[{"version":1,"percent":50},{"version":9,"percent":50}]}`
	if err := os.WriteFile(filepath.Join(e.repo.Root, model, bundle.RoutingFile), []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Reload(); err != nil {
		t.Fatal(err)
	}
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	for range 40 {
		if v := post(e.srv, predictURL, body).Header().Get("X-Model-Version"); v != "1" {
			t.Fatalf("answered by %q, want the default 1", v)
		}
	}
	if !strings.Contains(e.logs.String(), "not loaded") {
		t.Fatalf("no log line about the routing: %s", e.logs)
	}
}

// TestReportTelemetry runs the reporter into the repository and reads
// the record back as the gate activity does.
func TestReportTelemetry(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0)
	t.Cleanup(e.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.reg.ReportTelemetry(ctx, e.repo.Store, "srv_a", 10*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	body := mustJSON(t, map[string]any{"instances": f.instances[:3]})
	for range 5 {
		post(e.srv, predictURL, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, err := e.repo.Telemetry(ctx, model)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 && recs[0].Versions["1"].Live.Rows == 15 {
			if recs[0].Server != "srv_a" || recs[0].Versions["1"].Live.Requests != 5 {
				t.Fatalf("got %+v", recs[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record with 15 rows in 10 s: %+v", recs)
		}
		time.Sleep(5 * time.Millisecond) // polling the repository the reporter writes
	}
}

// TestRoutingKeyHash pins the key hash to hash/fnv's FNV-1a, which the
// documentation names: clients may compute their version's share.
func TestRoutingKeyHash(t *testing.T) {
	for _, k := range []string{"", "alice", "user-42", strings.Repeat("x", 300)} {
		h := fnv.New64a()
		h.Write([]byte(k))
		if got, want := serving.FNV64a(k), h.Sum64(); got != want {
			t.Errorf("%q: got %x, want %x", k, got, want)
		}
	}
}

// TestShadowQueueFullDrops holds the shadow worker inside its first
// copy, so the queue fills: the 64 next copies wait in it, the 35 after
// them are dropped and counted as queue_full (not busy: the worker was
// answering a copy), and every answer still comes at once, 200 from the
// live version. Let go, the worker answers the 65 copies it kept.
func TestShadowQueueFullDrops(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{}, 0, 1)
	t.Cleanup(e.srv.Close)
	started, release := make(chan struct{}, 100), make(chan struct{})
	serving.BlockShadow(e.srv, started, release)
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 100}}, Shadow: 2})
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	for i := range 100 {
		if w := post(e.srv, predictURL, body); w.Code != http.StatusOK || w.Header().Get("X-Model-Version") != "1" {
			t.Fatalf("request %d: got %d from %q", i, w.Code, w.Header().Get("X-Model-Version"))
		}
		if i == 0 {
			<-started // the worker holds the first copy
		}
	}
	m := serve(e.srv, http.MethodGet, "/metrics", "", nil).Body.String()
	for _, want := range []string{`trainflow_serving_shadow_dropped_total{reason="queue_full"} 35`, `trainflow_serving_shadow_dropped_total{reason="busy"} 0`} {
		if !strings.Contains(m, "\n"+want+"\n") {
			t.Fatalf("metrics: want %s (100 copies: 1 answering, 64 queued); got:\n%s", want, grepLines(m, "shadow_dropped"))
		}
	}
	// The drops reach version 2's shadow telemetry, through the model
	// repository as the rollout reads it.
	ctx := context.Background()
	if err := e.repo.WriteTelemetry(ctx, model, e.reg.Telemetry("srv_a", model, time.Now())); err != nil {
		t.Fatal(err)
	}
	recs, err := e.repo.Telemetry(ctx, model)
	if err != nil || len(recs) != 1 {
		t.Fatalf("telemetry records: got %+v, %v", recs, err)
	}
	if d := recs[0].Versions["2"].Shadow.Dropped; len(d) != 1 || d[rollout.ShadowDropQueueFull] != 35 {
		t.Fatalf("version 2's shadow telemetry: got dropped %v, want queue_full 35 only", d)
	}
	if d := recs[0].Versions["1"]; d.Live.Dropped != nil || d.Shadow.Dropped != nil {
		t.Fatalf("version 1 (live) counts drops: %+v", d)
	}
	close(release)
	if sh := waitShadowRequests(t, e, 65); sh.Requests != 65 {
		t.Fatalf("shadow counters after the worker was let go: got %+v, want 65 requests", sh)
	}
}

// TestShadowBusyDrops holds as many live predictions in flight as the
// server lets copies run beside (ShadowMaxLive 2), as a saturated server
// has: no copy runs while they last, the copies beyond the queue's 64
// (the worker may hold one more, waiting) are dropped and counted as busy,
// never as queue_full, and every answer still comes at once, 200 from the
// live version. Once the live predictions end, the worker answers the
// copies it kept.
func TestShadowBusyDrops(t *testing.T) {
	f := getFixture(t)
	e := newEnv(t, serving.Options{ShadowMaxLive: 2}, 0, 1)
	t.Cleanup(e.srv.Close)
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 100}}, Shadow: 2})
	release := serving.HoldLive(e.srv, 2)
	body := mustJSON(t, map[string]any{"instances": f.instances[:1]})
	for i := range 100 {
		if w := post(e.srv, predictURL, body); w.Code != http.StatusOK || w.Header().Get("X-Model-Version") != "1" {
			t.Fatalf("request %d: got %d from %q", i, w.Code, w.Header().Get("X-Model-Version"))
		}
	}
	if sh := e.reg.Telemetry("srv_test", model, time.Now()).Versions["2"].Shadow; sh.Requests != 0 {
		t.Fatalf("a copy ran while every core held a live prediction: %+v", sh)
	}
	m := serve(e.srv, http.MethodGet, "/metrics", "", nil).Body.String()
	busy := -1
	for _, n := range []int{35, 36} {
		if strings.Contains(m, fmt.Sprintf("\ntrainflow_serving_shadow_dropped_total{reason=\"busy\"} %d\n", n)) {
			busy = n
		}
	}
	if busy < 0 || !strings.Contains(m, "\n"+`trainflow_serving_shadow_dropped_total{reason="queue_full"} 0`+"\n") {
		t.Fatalf("metrics: want 35 or 36 copies dropped as busy and none as queue_full; got:\n%s", grepLines(m, "shadow_dropped"))
	}
	if d := e.reg.Telemetry("srv_test", model, time.Now()).Versions["2"].Shadow.Dropped; len(d) != 1 || d[rollout.ShadowDropBusy] != int64(busy) {
		t.Fatalf("version 2's shadow telemetry: got dropped %v, want busy %d only (as the metric)", d, busy)
	}
	release()
	if sh := waitShadowRequests(t, e, int64(100-busy)); sh.Requests != int64(100-busy) || sh.Errors != 0 {
		t.Fatalf("shadow counters once the cores were spare: got %+v, want %d requests", sh, 100-busy)
	}
}

// waitShadowRequests returns version 2's shadow counters once they count
// n requests, or after 10 s.
func waitShadowRequests(t *testing.T, e *env, n int64) rollout.Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sh := e.reg.Telemetry("srv_test", model, time.Now()).Versions["2"].Shadow
		if sh.Requests >= n || time.Now().After(deadline) {
			return sh
		}
		time.Sleep(time.Millisecond) // polling a counter the shadow worker raises
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestFeedbackAnyReplica runs two servers on one repository, each with
// the repository's feedback key (created once, mode 0600, by the first
// to ask): feedback on a routed prediction counts on the replica that did
// not answer it, in the answering version's online accuracy there, once
// per replica; an ID whose version, class or signature was changed, one
// signed with another key, or one of another model, is a 400 naming
// request_id, and counts nothing.
func TestFeedbackAnyReplica(t *testing.T) {
	f := getFixture(t)
	ctx := context.Background()
	e := newEnv(t, serving.Options{}, 0, 1)
	key, err := e.repo.FeedbackKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(e.repo.Root, bundle.FeedbackKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
	}
	newReplica := func() (*serving.Registry, *serving.Server) {
		k, err := e.repo.FeedbackKey(ctx) // the second ask reads the same key
		if err != nil || !bytes.Equal(k, key) {
			t.Fatalf("feedback key: %v, same %v", err, bytes.Equal(k, key))
		}
		reg := serving.NewRegistry(e.repo.Store, nil, slog.New(slog.DiscardHandler))
		srv := serving.New(reg, slog.New(slog.DiscardHandler), serving.Options{FeedbackKey: k})
		t.Cleanup(srv.Close)
		return reg, srv
	}
	e.route(t, rollout.Routing{Weights: []rollout.Weight{{Version: 1, Percent: 50}, {Version: 2, Percent: 50}}})
	regA, a := newReplica()
	regB, b := newReplica()
	for _, r := range []*serving.Registry{regA, regB} {
		if err := r.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	body := mustJSON(t, map[string]any{"instances": f.instances[:2]})
	w := post(a, predictURL, body)
	id, version := w.Header().Get("X-Request-Id"), w.Header().Get("X-Model-Version")
	preds := decodePredictions(t, w)
	if w.Code != http.StatusOK || !strings.Contains(id, "."+version+".") {
		t.Fatalf("replica a: %d, request ID %q: want 200 and an ID naming version %s", w.Code, id, version)
	}
	fb := "/v1/models/census/feedback"
	right := mustJSON(t, map[string]any{"request_id": id, "label": preds[1].Class, "instance": 1})
	if w := post(b, fb, right); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"correct":true`) || !strings.Contains(w.Body.String(), `"model_version":"`+version+`"`) {
		t.Fatalf("feedback on replica b: got %d %s, want 200, correct, version %s", w.Code, w.Body, version)
	}
	if w := post(b, fb, right); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "already counted") {
		t.Fatalf("the same ID again on b: got %d %s, want 404 already counted", w.Code, w.Body)
	}
	other := "1"
	if version == "1" {
		other = "2"
	}
	i := strings.LastIndexByte(id, '.')
	mac := id[i+1:]
	flipped := []byte(mac)
	flipped[0] ^= 1
	k2 := bytes.Repeat([]byte{7}, bundle.FeedbackKeyBytes)
	alien := serving.New(regB, slog.New(slog.DiscardHandler), serving.Options{FeedbackKey: k2})
	t.Cleanup(alien.Close)
	alienID := post(alien, predictURL, body).Header().Get("X-Request-Id")
	for name, bad := range map[string]string{
		"version changed":   strings.Replace(id, "."+version+".", "."+other+".", 1),
		"class changed":     id[:strings.LastIndexByte(id[:i], '.')+1] + "5-5." + mac,
		"signature changed": id[:i+1] + string(flipped),
		"unsigned":          "nosuch",
		"another key":       alienID,
	} {
		w := post(b, fb, mustJSON(t, map[string]any{"request_id": bad, "label": preds[0].Class}))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "request_id") {
			t.Errorf("%s (%s): got %d %s, want 400 naming request_id", name, bad, w.Code, w.Body)
		}
	}
	if w := post(b, "/v1/models/other/feedback", mustJSON(t, map[string]any{"request_id": id, "label": "x"})); w.Code != http.StatusBadRequest {
		t.Errorf("another model's feedback: got %d %s, want 400", w.Code, w.Body)
	}
	labelled := func(reg *serving.Registry) (l, c int64) {
		for _, vs := range reg.Telemetry("srv_test", model, time.Now()).Versions {
			l, c = l+vs.Live.Labelled, c+vs.Live.Correct
		}
		return l, c
	}
	if l, c := labelled(regB); l != 1 || c != 1 || regB.Telemetry("srv_test", model, time.Now()).Versions[version].Live.Correct != 1 {
		t.Fatalf("replica b: %d labelled, %d correct; want 1 and 1, in version %s", l, c, version)
	}
	// Replica a counts the same ID once too (each replica keeps its own
	// seen-set: docs/rollout.md#feedback), and then no more.
	if w := post(a, fb, right); w.Code != http.StatusOK {
		t.Fatalf("feedback on replica a: got %d %s", w.Code, w.Body)
	}
	if w := post(a, fb, right); w.Code != http.StatusNotFound {
		t.Fatalf("again on replica a: got %d %s, want 404", w.Code, w.Body)
	}
	if l, _ := labelled(regA); l != 1 {
		t.Fatalf("replica a: %d labelled, want 1", l)
	}
}
