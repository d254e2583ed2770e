package activities

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/dist"
)

// Metrics are a worker process's Prometheus metrics: what its activities
// train, evaluate and preprocess. Rates are rate() of the counters, e.g.
// steps/s is rate(trainflow_train_steps_total[1m]). A nil *Metrics
// records nothing.
type Metrics struct {
	reg *prometheus.Registry

	roleStarts, roleRestarts *prometheus.CounterVec
	rolesRunning             *prometheus.GaugeVec
	steps, examples          *prometheus.CounterVec
	globalStep, loss         *prometheus.GaugeVec
	evalMetric               *prometheus.GaugeVec
	pull, push, compute      prometheus.Observer
	wireSent, wireReceived   prometheus.Counter
	commit                   prometheus.Observer
	rows, badRows            prometheus.Counter
	preprocessSecs           prometheus.Observer
}

// NewMetrics makes the metrics, in a registry of their own.
func NewMetrics() *Metrics {
	latency := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 14)}) // 50 µs … 7.5 min
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		roleStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainflow_worker_role_starts_total",
			Help: "Activity attempts started in this process, by role (preprocess, train, chief, worker, ps, evaluate)."}, []string{"role"}),
		roleRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainflow_worker_role_restarts_total",
			Help: "Attempts after the first (a retry after a crash, timeout or error), by role."}, []string{"role"}),
		rolesRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trainflow_worker_roles_running",
			Help: "Activities running in this process now, by role."}, []string{"role"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainflow_train_steps_total",
			Help: "Training steps (gradients computed and applied or pushed) in this process, by role."}, []string{"role"}),
		examples: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainflow_train_examples_total",
			Help: "Examples trained on in this process, by role."}, []string{"role"}),
		globalStep: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trainflow_train_global_step",
			Help: "The job's global step as this process last saw it."}, []string{"job"}),
		loss: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trainflow_train_loss",
			Help: "The chief's mean training loss over the last summary period."}, []string{"job"}),
		evalMetric: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trainflow_eval_metric",
			Help: "The newest evaluation's metrics, by job and metric."}, []string{"job", "metric"}),
		pull:    latency("trainflow_ps_pull_seconds", "Time a worker waited for a pull of the parameters from the parameter servers."),
		push:    latency("trainflow_ps_push_seconds", "Time a worker waited for a push of its gradient to the parameter servers (in sync mode, including the other replicas)."),
		compute: latency("trainflow_train_step_compute_seconds", "Time to compute one gradient."),
		commit:  latency("trainflow_checkpoint_commit_seconds", "Time to write and commit one checkpoint."),
		wireSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "trainflow_ps_wire_sent_bytes_total",
			Help: "Bytes of messages workers in this process sent to parameter servers, as framed on the wire."}),
		wireReceived: prometheus.NewCounter(prometheus.CounterOpts{Name: "trainflow_ps_wire_received_bytes_total",
			Help: "Bytes of messages workers in this process received from parameter servers, as framed on the wire."}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "trainflow_preprocess_rows_total",
			Help: "Rows preprocessed (training and evaluation) by finished preprocessing runs."}),
		badRows: prometheus.NewCounter(prometheus.CounterOpts{Name: "trainflow_preprocess_bad_rows_total",
			Help: "Rows preprocessing rejected as bad records."}),
		preprocessSecs: latency("trainflow_preprocess_seconds", "Duration of finished preprocessing runs."),
	}
	m.reg.MustRegister(m.roleStarts, m.roleRestarts, m.rolesRunning, m.steps, m.examples, m.globalStep, m.loss, m.evalMetric,
		m.pull.(prometheus.Collector), m.push.(prometheus.Collector), m.compute.(prometheus.Collector), m.commit.(prometheus.Collector),
		m.wireSent, m.wireReceived, m.rows, m.badRows, m.preprocessSecs.(prometheus.Collector),
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// started counts an attempt of role and returns the function that marks
// it finished.
func (m *Metrics) started(role string, attempt int32) func() {
	if m == nil {
		return func() {}
	}
	m.roleStarts.WithLabelValues(role).Inc()
	if attempt > 1 {
		m.roleRestarts.WithLabelValues(role).Inc()
	}
	running := m.rolesRunning.WithLabelValues(role)
	running.Inc()
	return running.Dec
}

// stepper returns what to call after each training step of role in job.
func (m *Metrics) stepper(job, role string) func(globalStep int64, examples int) {
	if m == nil {
		return func(int64, int) {}
	}
	steps, examples, gs := m.steps.WithLabelValues(role), m.examples.WithLabelValues(role), m.globalStep.WithLabelValues(job)
	return func(globalStep int64, n int) {
		steps.Inc()
		examples.Add(float64(n))
		gs.Set(float64(globalStep))
	}
}

// psMeter returns what records each distributed step of a worker using
// c: where its time went, and the bytes c moved since the step before.
func (m *Metrics) psMeter(c *dist.Client) func(dist.StepStats) {
	if m == nil {
		return func(dist.StepStats) {}
	}
	var sent, received int64
	return func(st dist.StepStats) {
		m.pull.Observe(st.Pull.Seconds())
		m.compute.Observe(st.Compute.Seconds())
		m.push.Observe(st.Push.Seconds())
		s, r := c.WireBytes()
		m.wireSent.Add(float64(s - sent))
		m.wireReceived.Add(float64(r - received))
		sent, received = s, r
	}
}

func (m *Metrics) trainLoss(job string, loss float64) {
	if m != nil {
		m.loss.WithLabelValues(job).Set(loss)
	}
}

func (m *Metrics) committed(d time.Duration) {
	if m != nil {
		m.commit.Observe(d.Seconds())
	}
}

func (m *Metrics) evaluated(job string, ms train.Metrics) {
	if m == nil {
		return
	}
	tags, values := metricScalars(ms)
	for i, t := range tags {
		m.evalMetric.WithLabelValues(job, t).Set(values[i])
	}
}

func (m *Metrics) preprocessed(rows, bad int64, d time.Duration) {
	if m == nil {
		return
	}
	m.rows.Add(float64(rows))
	m.badRows.Add(float64(bad))
	m.preprocessSecs.Observe(d.Seconds())
}
