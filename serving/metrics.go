package serving

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trainflow/trainflow/rollout"
)

// metrics are the server's Prometheus metrics, in a registry of its own so
// that several servers (tests) never collide.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// shed counts connections closed to free their slot, by reason
	// (shedIdle, shedStalled, shedClient); conns is the number open,
	// set by Serve.
	shed  *prometheus.CounterVec
	conns atomic.Pointer[atomic.Int64]
	// shadowDropped counts copies of requests not sent to a shadow
	// version because its queue was full, by reason (shadowDropBusy,
	// shadowDropQueueFull).
	shadowDropped map[string]prometheus.Counter

	// series caches the children of requests and latency by label
	// values, so that a request costs a map lookup, not the label hashing
	// of WithLabelValues and its allocations.
	mu     sync.RWMutex
	series map[seriesKey]series
}

// seriesKey is the label values of one request: model and version are
// empty for requests no loaded model answered.
type seriesKey struct {
	route, model, version string
	code                  int
}

type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

func newMetrics(reg *Registry) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trainflow_serving_requests_total",
			Help: "Requests by route, model, version and HTTP status code.",
		}, []string{"route", "model", "version", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trainflow_serving_request_duration_seconds",
			Help:    "Request latency by route, model, version and HTTP status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "model", "version", "code"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trainflow_serving_connections_shed_total",
			Help: "Connections closed to give their slot to a new client, by reason: idle (kept alive, idle), stalled (still sending headers or body), client_limit (a new connection over its address's limit).",
		}, []string{"reason"}),
		series: map[seriesKey]series{},
	}
	for _, r := range []string{shedIdle, shedStalled, shedClient} {
		m.shed.WithLabelValues(r)
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainflow_serving_shadow_dropped_total",
		Help: "Copies of routed requests not answered by the shadow version because its queue was full, by reason: busy (the shadow worker was waiting for a core no live prediction used), queue_full (the shadow version answered slower than copies came).",
	}, []string{"reason"})
	m.shadowDropped = map[string]prometheus.Counter{}
	for _, r := range rollout.ShadowDropReasons {
		m.shadowDropped[r] = dropped.WithLabelValues(r)
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "trainflow_serving_connections_open",
		Help: "Connections open, each holding one of the server's connection slots.",
	}, func() float64 {
		if n := m.conns.Load(); n != nil {
			return float64(n.Load())
		}
		return 0
	})
	loaded := prometheus.NewDesc("trainflow_serving_model_versions_loaded", "Model versions loaded and serving.", []string{"model"}, nil)
	m.reg.MustRegister(m.requests, m.latency, m.shed, dropped, open, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
		collectorFunc{desc: loaded, collect: func(ch chan<- prometheus.Metric) {
			for _, name := range reg.Models() {
				if vs, _, err := reg.Status(name); err == nil {
					ch <- prometheus.MustNewConstMetric(loaded, prometheus.GaugeValue, float64(len(vs)), name)
				}
			}
		}})
	return m
}

// collectorFunc is a prometheus.Collector computed at scrape time.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// observe records one request of route answered by sv (nil if no loaded
// model answered) with HTTP status code after d. Only loaded models get
// their own label values, so unknown names cannot grow the label sets.
func (m *metrics) observe(route string, sv *Servable, code int, d time.Duration) {
	k := seriesKey{route: route, code: code}
	if sv != nil {
		k.model, k.version = sv.Model, sv.versionText
	}
	m.mu.RLock()
	s, ok := m.series[k]
	m.mu.RUnlock()
	if !ok {
		labels := []string{k.route, k.model, k.version, strconv.Itoa(code)}
		s = series{requests: m.requests.WithLabelValues(labels...), latency: m.latency.WithLabelValues(labels...)}
		m.mu.Lock()
		m.series[k] = s
		m.mu.Unlock()
	}
	s.requests.Inc()
	s.latency.Observe(d.Seconds())
}

// handler serves the metrics in the Prometheus text format.
func (m *metrics) handler() echo.HandlerFunc {
	return echo.WrapHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

// setMetricLabels names the servable a request is answered by.
func setMetricLabels(c echo.Context, sv *Servable) {
	if x, ok := c.Response().Writer.(*exchange); ok {
		x.sv = sv
	}
}
