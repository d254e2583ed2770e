package cli

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/trainflow/trainflow/jobspec"
)

// scrape reads the worker's /metrics and returns its families by name.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s %s", resp.Status, b)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of the series of family name whose labels
// include want ("k=v" pairs), or NaN when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return math.NaN()
	}
next:
	for _, m := range f.Metric {
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return math.NaN()
}

// TestWorkerMetrics runs a BASIC and a distributed job on a worker with
// --metrics-listen and checks what it exposes against the jobs' results.
func TestWorkerMetrics(t *testing.T) {
	st := testStack(t, t.TempDir(), func(c *stackConfig) { c.MetricsAddr = "127.0.0.1:0" })
	res, err := waitJob(t, startUIStyle(t, st.Client, "metrics_basic", jobInput("metrics_basic", `{"generated_rows":2000}`, `{}`, 300, 100)))
	if err != nil {
		t.Fatal(err)
	}
	m := scrape(t, st.MetricsAddr)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"trainflow_train_steps_total", []string{"role=train"}, 300},
		{"trainflow_train_global_step", []string{"job=metrics_basic"}, 300},
		{"trainflow_checkpoint_commit_seconds", nil, 3},
		{"trainflow_eval_metric", []string{"job=metrics_basic", "metric=accuracy"}, res.Metrics.Accuracy},
		{"trainflow_eval_metric", []string{"job=metrics_basic", "metric=auc"}, res.Metrics.AUC},
		{"trainflow_preprocess_rows_total", nil, float64(res.TrainRows + res.EvalRows)},
		{"trainflow_preprocess_bad_rows_total", nil, 0},
		{"trainflow_worker_role_starts_total", []string{"role=train"}, 1},
		{"trainflow_worker_role_starts_total", []string{"role=preprocess"}, 1},
		{"trainflow_worker_roles_running", []string{"role=train"}, 0},
	} {
		if got := value(m, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := value(m, "trainflow_worker_role_starts_total", "role=evaluate"); !(n >= 1) {
		t.Errorf("evaluations started: %v, want at least one", n)
	}
	if l := value(m, "trainflow_train_loss", "job=metrics_basic"); !(l > 0 && l < 5) {
		t.Errorf("training loss %v, want a plausible log loss", l)
	}
	batch := jobspec.JobSpec{Preset: "census"}.WithDefaults().Model.BatchSize
	if ex := value(m, "trainflow_train_examples_total", "role=train"); ex != float64(300*batch) {
		t.Errorf("examples trained %v, want 300 steps × batch %d", ex, batch)
	}

	_, err = waitJob(t, startUIStyle(t, st.Client, "metrics_dist", jobInput("metrics_dist", `{"generated_rows":2000}`,
		`{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"update":"async"}`, 200, 100)))
	if err != nil {
		t.Fatal(err)
	}
	m = scrape(t, st.MetricsAddr)
	steps := value(m, "trainflow_train_steps_total", "role=chief") + value(m, "trainflow_train_steps_total", "role=worker")
	if !(steps >= 200) || value(m, "trainflow_ps_pull_seconds") != steps || value(m, "trainflow_ps_push_seconds") != steps {
		t.Errorf("distributed: %v steps, %v pulls, %v pushes timed; want ≥ 200, one of each per step",
			steps, value(m, "trainflow_ps_pull_seconds"), value(m, "trainflow_ps_push_seconds"))
	}
	// A push carries a gradient, a pull the weights: each more than 50
	// float64s for the census linear model.
	sent, received := value(m, "trainflow_ps_wire_sent_bytes_total"), value(m, "trainflow_ps_wire_received_bytes_total")
	if !(sent/steps > 400 && received/steps > 400) {
		t.Errorf("bytes on the wire: %v sent, %v received for %v steps; want more than 400 a step each way", sent, received, steps)
	}
	// The gauge is the step the process's roles last saw: an async
	// worker's last push may have seen a step behind the chief's 200
	// (166 once on a loaded machine), never one past it.
	if v := value(m, "trainflow_train_global_step", "job=metrics_dist"); v < 100 || v > 200 {
		t.Errorf("distributed global step %v, want the second half of training (100…200)", v)
	}
	if v := value(m, "trainflow_worker_role_starts_total", "role=ps"); v != 1 {
		t.Errorf("parameter servers started: %v, want 1", v)
	}
}

// freeAddr returns a loopback address with a port free a moment ago, for
// a process started with it.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestDistributedMetricsFromEachProcess scrapes three worker processes,
// one role each, twice while a distributed job trains: each process
// running a chief or a worker shows its step counter moving (a non-zero
// step rate), and the parameter server's process shows its role. A
// CUSTOM job with worker_count 1 runs a chief, a worker and a parameter
// server.
func TestDistributedMetricsFromEachProcess(t *testing.T) {
	c := newClusterWith(t, clusterOptions{Workers: 3, MaxRoles: 1, Metrics: true})
	id := "metrics_procs"
	run := startUIStyle(t, c.st.Client, id, jobInput(id, `{"generated_rows":4000}`,
		`{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"update":"async"}`, 1_000_000, 1000))
	defer c.st.Client.CancelWorkflow(context.Background(), run.GetID(), "")
	c.waitStep(id, 1000)
	first := make([]map[string]*dto.MetricFamily, len(c.metrics))
	for i, addr := range c.metrics {
		first[i] = waitScrape(t, addr)
	}
	c.waitStep(id, 3000)
	training, ps := 0, 0
	for i, addr := range c.metrics {
		second := scrape(t, addr)
		if value(second, "trainflow_worker_roles_running", "role=ps") == 1 {
			ps++
		}
		var before, after float64
		for _, role := range []string{"chief", "worker"} {
			if value(second, "trainflow_worker_roles_running", "role="+role) != 1 {
				continue
			}
			training++
			// A role that had not started at the first scrape had no steps.
			before, after = value(first[i], "trainflow_train_steps_total", "role="+role), value(second, "trainflow_train_steps_total", "role="+role)
			if math.IsNaN(before) {
				before = 0
			}
			if !(after > before) {
				t.Errorf("process %d (%s): steps %v then %v, want a non-zero step rate", i, role, before, after)
			}
			if n := value(second, "trainflow_ps_pull_seconds"); !(n >= after) {
				t.Errorf("process %d (%s): %v pulls timed for %v steps", i, role, n, after)
			}
		}
	}
	if training != 2 || ps != 1 {
		t.Fatalf("%d processes run a training role and %d a parameter server, want 2 and 1 (one role each)", training, ps)
	}
}

// waitScrape scrapes addr, waiting for a process that may still be
// starting its metrics server.
func waitScrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
			return scrape(t, addr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics at %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's listener
	}
}
