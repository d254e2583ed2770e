package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/tfevents"
)

func writeEvents(t *testing.T, dir, writer string, step int64, tags []string, values []float64) {
	t.Helper()
	var b tfevents.Batch
	b.Add(step, time.Unix(1700000000, 0), tags, values)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tfevents.FileName(step, writer)), b.File(time.Unix(1700000000, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReportsFromEventFiles: a program that writes no hypertune file but
// event files reports their newest step and each tag's newest value, its
// curve of a tag is read from them; once it writes a hypertune line, the
// file is what counts.
func TestReportsFromEventFiles(t *testing.T) {
	ws, logs := t.TempDir(), t.TempDir()
	mf := filepath.Join(ws, MetricsFileName)
	r := NewReports(mf, logs)
	if _, ok := r.Latest(); ok {
		t.Fatal("a report before the program wrote anything")
	}
	writeEvents(t, logs, "a", 10, []string{"accuracy", "loss"}, []float64{0.5, 1.25})
	writeEvents(t, logs, "b", 20, []string{"accuracy"}, []float64{0.75})
	writeEvents(t, filepath.Join(logs, "validation"), "c", 20, []string{"accuracy"}, []float64{0.625})
	m, ok := r.Latest()
	want := map[string]float64{"accuracy": 0.75, "loss": 1.25, "validation/accuracy": 0.625}
	if !ok || m.Step != 20 || len(m.Values) != 3 || m.Values["accuracy"] != 0.75 || m.Values["loss"] != 1.25 || m.Values["validation/accuracy"] != 0.625 || m.Timestamp != 1700000000 {
		t.Fatalf("latest %+v, want step 20 with %v", m, want)
	}
	// The points to record: what was read, by step, once.
	if got, want := fmt.Sprint(r.Points()), "[{10 1.7e+09  map[accuracy:0.5 loss:1.25]} {20 1.7e+09  map[accuracy:0.75 validation/accuracy:0.625]}]"; got != want {
		t.Fatalf("points from the event files %s, want %s", got, want)
	}
	if _, ok := r.Latest(); !ok || r.Points() != nil {
		t.Fatalf("points again from event files read before: %v", r.Points())
	}
	writeEvents(t, logs, "d", 30, []string{"accuracy"}, []float64{0.875})
	if _, ok := r.Latest(); !ok || fmt.Sprint(r.Points()) != "[{30 1.7e+09  map[accuracy:0.875]}]" {
		t.Fatalf("points of a new event file %v, want step 30 only", r.Points())
	}
	c, err := Curve(mf, logs, "accuracy")
	if err != nil || !slices.Equal(c, []Point{{10, 0.5}, {20, 0.75}, {30, 0.875}}) {
		t.Fatalf("curve %v, %v", c, err)
	}
	if c, _ := Curve(mf, "", "accuracy"); len(c) != 0 {
		t.Fatalf("curve without the event dir: %v", c)
	}
	if err := os.WriteFile(mf, []byte(`{"global_step": "5", "accuracy": "0.125"}`+"\n"+`{"global_step": 7, "accuracy": 0.25}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, ok := r.Latest(); !ok || m.Step != 7 || m.Values["accuracy"] != 0.25 || len(m.Values) != 1 {
		t.Fatalf("with a hypertune file: %+v", m)
	}
	if p := r.Points(); len(p) != 2 || p[0].Step != 5 || p[1].Step != 7 {
		t.Fatalf("points of the hypertune file %v, want its 2 lines", p)
	}
	if r.Latest(); r.Points() != nil {
		t.Fatalf("points again from lines read before: %v", r.Points())
	}
	if err := os.WriteFile(mf, []byte(`{"global_step": 1, "accuracy": 0.5}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.Latest(); len(r.Points()) != 1 || r.Points()[0].Step != 1 {
		t.Fatalf("points of a file started again %v, want its line", r.Points())
	}
	if c, err := Curve(mf, logs, "accuracy"); err != nil || !slices.Equal(c, []Point{{1, 0.5}}) {
		t.Fatalf("hypertune curve %v, %v", c, err)
	}
}

// TestReadMetricsFileIsBounded: a metrics file is the program's: a link
// (to a secret, or to an endless device) is refused, not followed, and of
// a file over MaxMetricsFile only its last whole lines are read.
func TestReadMetricsFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte(`{"global_step": 1, "score": 42}`+"\n"), 0o600)
	for _, target := range []string{secret, "/dev/zero"} {
		link := filepath.Join(dir, "link")
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if ms, err := ReadMetricsFile(link); err == nil || len(ms) > 0 {
			t.Errorf("a link to %s: %v, %v; want it refused", target, ms, err)
		}
	}
	big := filepath.Join(dir, "big")
	line := []byte(`{"global_step": 1, "pad": 0.` + strings.Repeat("0", 1000) + `1}` + "\n")
	b := make([]byte, 0, MaxMetricsFile+2*len(line))
	for len(b) < MaxMetricsFile+len(line)/2 {
		b = append(b, line...)
	}
	b = append(b, `{"global_step": 99, "score": 0.5}`+"\n"...)
	os.WriteFile(big, b, 0o644)
	ms, err := ReadMetricsFile(big)
	if m, ok := Latest(ms); err != nil || !ok || m.Step != 99 || m.Values["score"] != 0.5 {
		t.Fatalf("big file: latest %+v, %v", m, err)
	}
	_, err = ReadMetrics(strings.NewReader(`{"global_step": 1, "` + strings.Repeat("k", 1<<20) + `": "` + strings.Repeat("v", 1<<20) + `"}` + "\n"))
	if !errors.Is(err, ErrMetrics) || len(err.Error()) > 300 {
		t.Errorf("a line of a huge key and value: an error of %d bytes, want ErrMetrics of a few hundred", len(err.Error()))
	}
	if len(ms) > MaxMetricsFile/len(line)+1 {
		t.Errorf("%d lines read, more than its last %d bytes hold", len(ms), MaxMetricsFile)
	}
}

// TestReportsAreBounded: what goes into heartbeats and signals is at most
// MaxReportTags tags of at most MaxReportTag bytes, whatever the program
// reports, from either source.
func TestReportsAreBounded(t *testing.T) {
	ws, logs := t.TempDir(), t.TempDir()
	tags := []string{strings.Repeat("t", MaxReportTag+1)}
	vals := []float64{1}
	for i := range 150 {
		tags = append(tags, fmt.Sprintf("tag%03d", i))
		vals = append(vals, float64(i))
	}
	writeEvents(t, logs, "a", 1, tags, vals)
	check := func(src string, m Metric, ok bool) {
		t.Helper()
		if !ok || len(m.Values) != MaxReportTags || m.Values["tag000"] != 0 || m.Values["tag099"] != 99 {
			t.Errorf("%s: %d tags (ok %v), want the first %d", src, len(m.Values), ok, MaxReportTags)
		}
		for k := range m.Values {
			if len(k) > MaxReportTag {
				t.Errorf("%s: a tag of %d bytes", src, len(k))
			}
		}
	}
	r := NewReports(filepath.Join(ws, MetricsFileName), logs)
	m, ok := r.Latest()
	check("event files", m, ok)
	line := map[string]any{"global_step": 1}
	for i, tag := range tags {
		line[tag] = vals[i]
	}
	b, _ := json.Marshal(line)
	os.WriteFile(filepath.Join(ws, MetricsFileName), append(b, '\n'), 0o644)
	m, ok = r.Latest()
	check("metrics file", m, ok)
}
