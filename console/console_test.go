package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/internal/tfevents"
)

func serve(t *testing.T, opts Options) *echo.Echo {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	c.Routes(e)
	return e
}

func request(e http.Handler, method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

// TestWithoutTemporalOrModels: a console with no client and no models
// says so instead of failing.
func TestWithoutTemporalOrModels(t *testing.T) {
	e := serve(t, Options{})
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/console/", http.StatusFound, ""},
		{"/console/jobs", http.StatusOK, "not connected to Temporal"},
		{"/console/jobs/census_1", http.StatusServiceUnavailable, "not connected to Temporal"},
		{"/console/jobs/1bad", http.StatusBadRequest, "must start with a letter"},
		{"/console/models", http.StatusOK, "no models are served yet"},
		{"/console/models/census", http.StatusNotFound, "serves no models"},
	} {
		rec := request(e, http.MethodGet, c.path)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("GET %s: %d %q, want %d containing %q", c.path, rec.Code, rec.Body.String(), c.code, c.want)
		}
		if c.code != http.StatusFound && !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET %s: no restrictive Content-Security-Policy", c.path)
		}
	}
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestJobDirCharts reads a job directory written the way the activities
// write it and checks the charts' series, the roles and the bounds.
func TestJobDirCharts(t *testing.T) {
	dir := t.TempDir()
	var events strings.Builder
	for _, ev := range []string{
		`{"event":"ps_start","task":0,"host":"h1","pid":10}`,
		`{"event":"worker_start","task":0,"attempt":1,"pid":11}`,
		`{"event":"worker_start","task":1,"attempt":1,"pid":12}`,
		`{"event":"checkpoint","global_step":100,"loss":0.6,"examples_per_sec":1000}`,
		`{"event":"ps_start","task":0,"host":"h2","pid":20}`,
		`{"event":"worker_start","task":1,"attempt":2,"pid":21}`,
		`{"event":"ps_recovered","task":1,"gen":2,"restore_step":100,"last_step":150}`,
		`{"event":"checkpoint","global_step":200,"loss":0.4,"examples_per_sec":1200}`,
		`not json`,
	} {
		events.WriteString(ev + "\n")
	}
	write(t, dir, "events.jsonl", []byte(events.String()))
	write(t, dir, "eval/metrics.jsonl", []byte(`{"global_step":100,"metrics":{"examples":50,"accuracy":0.8,"log_loss":0.5,"auc":0.7}}
{"global_step":"secret-ish content","metrics":{}}
{"global_step":200,"metrics":{"examples":50,"accuracy":0.85,"log_loss":0.4,"auc":0.8}}
`))
	var b tfevents.Batch
	for s := int64(50); s <= 200; s += 50 {
		b.Add(s, time.Now(), []string{"loss", "examples_per_sec"}, []float64{1 / float64(s), float64(10 * s)})
	}
	write(t, dir, "logs/train/"+tfevents.FileName(50, "chief"), b.File(time.Now()))
	write(t, dir, "logs/train/"+tfevents.FileName(250, "chief"), []byte("torn"))
	write(t, dir, "export/best/200/metadata.json", []byte(`{}`))
	write(t, dir, "export/final/200/metadata.json", []byte(`{}`))
	write(t, dir, "export/latest/300/model.bin", []byte(`no metadata: incomplete`))
	write(t, dir, "data/manifest.json", []byte(`{"train_rows":10,"bad":{"parse":2,"columns":1}}`))

	d := readJobDir(context.Background(), openTestDir(t, dir), DefaultMaxPageBytes, DefaultMaxPoints)
	if len(d.Events) != 8 || d.EventsTotal != 8 || len(d.Evals) != 2 || d.Loss.n != 4 || len(d.Exports) != 2 || d.Manifest == nil {
		t.Fatalf("read %d events, %d evals, %d losses, %d exports, manifest %v; want 8, 2, 4, 2, set",
			len(d.Events), len(d.Evals), d.Loss.n, len(d.Exports), d.Manifest != nil)
	}
	// Unreadable records are reported by line, never quoted.
	if len(d.Problems) != 3 || d.Problems[0] != "1 unreadable line in events.jsonl (line 9)" ||
		d.Problems[1] != "1 unreadable line in eval/metrics.jsonl (line 2)" || !strings.Contains(d.Problems[2], "tfevents") {
		t.Errorf("problems %q, want the unreadable lines of events.jsonl and eval/metrics.jsonl, then the torn event file named", d.Problems)
	}
	got := fmt.Sprint(d.Roles)
	want := "[{chief 1 0  11 } {worker 1 2 1  21 saw cluster generation 2: rolled back to step 100} {ps 0 2 1 h2 20 }]"
	if got != want {
		t.Errorf("roles\n got %s\nwant %s", got, want)
	}
	charts := jobCharts(d, slog.New(slog.DiscardHandler))
	if len(charts) != 2 {
		t.Fatalf("%d charts, want 2", len(charts))
	}
	for i, want := range [][]string{
		{"loss (train)", "log_loss (eval)", "accuracy (eval)", "auc (eval)", "checkpoint", "export"},
		{"examples/s (train)", "checkpoint"},
	} {
		c := charts[i]
		if fmt.Sprint(c.Series) != fmt.Sprint(want) {
			t.Errorf("chart %q series %v, want %v", c.Title, c.Series, want)
		}
		for _, s := range want {
			if !strings.Contains(string(c.SVG), ">"+s+"</text>") {
				t.Errorf("chart %q: SVG has no legend text %q", c.Title, s)
			}
		}
	}
}

// TestBoundedReads: a log over the bound is cut, and the page says so.
func TestBoundedReads(t *testing.T) {
	dir := t.TempDir()
	line := `{"event":"checkpoint","global_step":1,"pad":"` + strings.Repeat("x", 1000) + `"}` + "\n"
	write(t, dir, "events.jsonl", []byte(strings.Repeat(line, maxLogBytes/len(line)+10)))
	d := readJobDir(context.Background(), openTestDir(t, dir), DefaultMaxPageBytes, DefaultMaxPoints)
	if len(d.Truncated) != 1 || d.EventsTotal != maxLogBytes/len(line) || len(d.Events) != maxEventsShown {
		t.Errorf("truncated %q with %d events (%d shown), want one note and %d events (%d shown)", d.Truncated, d.EventsTotal, len(d.Events), maxLogBytes/len(line), maxEventsShown)
	}
}

// openTestDir opens the job directory dir as a console whose one root is
// dir's parent does.
func openTestDir(t testing.TB, dir string) *jobStore {
	t.Helper()
	c, err := New(Options{Roots: []string{filepath.Dir(dir)}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.openJobDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestApplicationCharts: the metrics an application's chief and
// evaluator reported (app_metrics events, as the AppReplica activity
// records them) are curves of the job page's first chart, one per tag and
// replica, over the global step; at most maxAppSeries of them.
func TestApplicationCharts(t *testing.T) {
	dir := t.TempDir()
	var events strings.Builder
	for s, acc := range []float64{0.75, 0.8, 0.85} {
		fmt.Fprintf(&events, `{"event":"app_metrics","replica":"chief-0","global_step":%d,"metrics":{"accuracy":%g,"loss":%g}}`+"\n", 100*(s+1), acc, 1/float64(s+1))
	}
	events.WriteString(`{"event":"app_metrics","replica":"evaluator-0","global_step":300,"metrics":{"accuracy":0.8}}` + "\n")
	write(t, dir, "events.jsonl", []byte(events.String()))
	d := readJobDir(context.Background(), openTestDir(t, dir), DefaultMaxPageBytes, DefaultMaxPoints)
	if got := fmt.Sprint(d.AppOrder); got != "[accuracy (chief-0) loss (chief-0) accuracy (evaluator-0)]" {
		t.Fatalf("application series %s", got)
	}
	if got := fmt.Sprint(d.App["accuracy (chief-0)"].points()); got != "[{100 0.75} {200 0.8} {300 0.85}]" {
		t.Errorf("accuracy (chief-0) points %s, want the three reports", got)
	}
	charts := jobCharts(d, slog.New(slog.DiscardHandler))
	if len(charts) != 1 || fmt.Sprint(charts[0].Series) != "[accuracy (chief-0) loss (chief-0) accuracy (evaluator-0)]" {
		t.Fatalf("charts %v, want one with the three application series", charts)
	}
	for _, s := range charts[0].Series {
		if !strings.Contains(string(charts[0].SVG), ">"+s+"</text>") {
			t.Errorf("chart: SVG has no legend text %q", s)
		}
	}

	// A program reporting many tags: the first maxAppSeries, and a note.
	var many strings.Builder
	many.WriteString(`{"event":"app_metrics","replica":"chief-0","global_step":1,"metrics":{`)
	for i := range 2 * maxAppSeries {
		if i > 0 {
			many.WriteString(",")
		}
		fmt.Fprintf(&many, `"t%02d":%d`, i, i)
	}
	many.WriteString("}}\n")
	write(t, dir, "events.jsonl", []byte(many.String()))
	d = readJobDir(context.Background(), openTestDir(t, dir), DefaultMaxPageBytes, DefaultMaxPoints)
	if len(d.AppOrder) != maxAppSeries || d.AppOrder[0] != "t00 (chief-0)" || len(d.Truncated) != 1 || !strings.Contains(d.Truncated[0], "application metrics") {
		t.Errorf("%d series (first %v), truncated %q; want %d and a note", len(d.AppOrder), d.AppOrder, d.Truncated, maxAppSeries)
	}
}
