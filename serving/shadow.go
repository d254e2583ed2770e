package serving

import (
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// shadowQueue bounds the copies of requests waiting for the shadow
// version: a copy that finds the queue full is dropped (and counted in
// trainflow_serving_shadow_dropped_total), so shadowing never holds up
// an answer or grows without bound.
const shadowQueue = 64

// shadowJob is a copy of a routed :predict request (v1) or V2 infer
// request (v2) for the shadow version sv: its body, and the live answer's
// class index (classifiers) or value (regressors) per instance, to count
// agreement.
type shadowJob struct {
	sv      *Servable
	body    []byte
	v2      bool
	classes []int32
	values  []float64
}

// pick returns the version that answers a request for model naming
// version (0: none) or label (""): that one, never split, if it names
// one; else the one the model's routing picks by the request's
// X-Routing-Key (routed true), with its shadow version.
func (s *Server) pick(c echo.Context, model string, version int64, label string) (sv, shadow *Servable, routed bool, err error) {
	if version != 0 || label != "" {
		sv, err = s.servable(target{model: model, version: version, label: label})
		return sv, nil, false, err
	}
	return s.reg.Route(model, c.Request().Header.Get(HeaderRoutingKey))
}

// answered counts the n rows sv answered in sc, and, for a routed
// request, remembers its predictions under its request ID for feedback.
func (s *Server) answered(c echo.Context, sv *Servable, sc *scratch, n int, routed bool) {
	if sv.tel == nil {
		return
	}
	sv.tel.live.answers(sv, sc, n)
	if routed {
		if id := c.Response().Header()[echo.HeaderXRequestID]; len(id) == 1 {
			s.feedback.remember(id[0], sv, sc, n)
		}
	}
}

// enqueueShadow queues a copy of the :predict request (a V2 infer
// request if v2) in sc, which primary answered with n instances, for the
// shadow version, or drops it if the queue is full. It copies the body
// and one number per instance.
func (s *Server) enqueueShadow(shadow, primary *Servable, sc *scratch, n int, v2 bool) {
	if shadow.tel == nil || len(s.shadowQ) == cap(s.shadowQ) {
		s.metrics.shadowDropped.Inc()
		return
	}
	j := shadowJob{sv: shadow, body: append([]byte(nil), sc.body...), v2: v2}
	if k := primary.Bundle.Model.NumClasses(); k > 0 {
		j.classes = make([]int32, n)
		for i := range n {
			j.classes[i] = int32(argmax(sc.probs[i*k : (i+1)*k]))
		}
	} else {
		k := primary.Bundle.Model.Outputs()
		j.values = make([]float64, n)
		for i := range n {
			j.values[i] = sc.logits[i*k]
		}
	}
	select {
	case s.shadowQ <- j:
	default:
		s.metrics.shadowDropped.Inc()
	}
}

// runShadow answers the queued copies with their shadow version until
// Close, counting them in the version's shadow counters; their answers
// go nowhere.
func (s *Server) runShadow() {
	for {
		select {
		case <-s.shadowDone:
			return
		case j := <-s.shadowQ:
			s.shadowOne(j)
		}
	}
}

// shadowOne answers one copy. A panic is counted as a 500 and logged.
func (s *Server) shadowOne(j shadowJob) {
	start := time.Now()
	sc := getScratch()
	code := http.StatusOK
	tel := &j.sv.tel.shadow
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("shadow prediction panicked", "model", j.sv.Model, "version", j.sv.Version, "panic", r)
			code = http.StatusInternalServerError
			sc = &scratch{feats: rawObject{}} // do not pool a scratch left midway
		}
		tel.observe(code, time.Since(start))
		putScratch(sc)
	}()
	sc.body = append(sc.body[:0], j.body...)
	var n int
	var err error
	if j.v2 {
		if err = decodeV2(&sc.v2, sc.body, j.sv.limits(s.opts.MaxInstances)); err == nil {
			n, err = s.v2Predict(sc, j.sv)
		}
	} else {
		n, err = s.predict(sc, j.sv)
	}
	if err != nil {
		code = statusOf(err)
		return
	}
	tel.answers(j.sv, sc, n)
	if n != max(len(j.classes), len(j.values)) {
		return
	}
	agreed := 0
	if k := j.sv.Bundle.Model.NumClasses(); k > 0 && j.classes != nil {
		for i := range n {
			if int32(argmax(sc.probs[i*k:(i+1)*k])) == j.classes[i] {
				agreed++
			}
		}
	} else if k := j.sv.Bundle.Model.Outputs(); k > 0 && j.values != nil && j.sv.Bundle.Model.NumClasses() == 0 {
		for i := range n {
			a, b := sc.logits[i*k], j.values[i]
			if math.Abs(a-b) <= 1e-6*max(math.Abs(a), math.Abs(b), 1) {
				agreed++
			}
		}
	} else {
		return // a classifier shadowing a regressor, or the reverse
	}
	tel.compared.Add(int64(n))
	tel.agreed.Add(int64(agreed))
}

// statusOf is the status code handleError answers err with.
func statusOf(err error) int {
	var he *httpError
	var ee *echo.HTTPError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.As(err, &ee):
		return ee.Code
	}
	return http.StatusInternalServerError
}
