package serving

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, in a registry of its own so
// that several servers (tests) never collide.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// Context keys under which handlers name the model and version a request
// was served by, for the metric labels.
const (
	ctxModel   = "trainflow.model"
	ctxVersion = "trainflow.version"
)

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
	}
	loaded := prometheus.NewDesc("trainflow_serving_model_versions_loaded", "Model versions loaded and serving.", []string{"model"}, nil)
	m.reg.MustRegister(m.requests, m.latency, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
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

// middleware records every request's count and latency. Model and version
// labels come from the handler (setMetricLabels): only loaded models get
// their own label values, so unknown names cannot grow the label sets.
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // write the error response now, to record its code
		}
		model, _ := c.Get(ctxModel).(string)
		version, _ := c.Get(ctxVersion).(string)
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		code := strconv.Itoa(c.Response().Status)
		m.requests.WithLabelValues(route, model, version, code).Inc()
		m.latency.WithLabelValues(route, model, version, code).Observe(time.Since(start).Seconds())
		return nil
	}
}

// handler serves the metrics in the Prometheus text format.
func (m *metrics) handler() echo.HandlerFunc {
	return echo.WrapHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

// setMetricLabels names the servable a request is answered by.
func setMetricLabels(c echo.Context, sv *Servable) {
	c.Set(ctxModel, sv.Model)
	c.Set(ctxVersion, strconv.FormatInt(sv.Version, 10))
}
