package serving

import (
	"errors"
	"math"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/rollout"
)

// shadowQueue bounds the copies of requests waiting for the shadow
// version: a copy that finds the queue full is dropped (and counted in
// trainflow_serving_shadow_dropped_total, by reason), so shadowing never
// holds up an answer or grows without bound.
const shadowQueue = 64

// Reasons a copy for the shadow version is dropped: the label values of
// trainflow_serving_shadow_dropped_total and the keys of the shadow
// version's telemetry (rollout.Stats.Dropped), owned by rollout.
const (
	// shadowDropBusy: the queue was full while the shadow worker was not
	// answering a copy: it waited for a spare core (shadowCapacity), or
	// rested after a copy (shadowShare), or had not been given a core yet.
	shadowDropBusy = rollout.ShadowDropBusy
	// shadowDropQueueFull: the queue was full while the shadow worker was
	// answering a copy (the shadow version is slower than the copies come).
	shadowDropQueueFull = rollout.ShadowDropQueueFull
)

// shadowCapacity decides when a copy may start: only while fewer than max
// live predictions are in flight on this server (Options.ShadowMaxLive,
// by default one fewer than the cores, so that a core stays free for the
// next request while a copy runs). Live predictions are counted from the
// end of their body's read to the end of their handler (begin, end); the
// shadow worker waits in wait until the count is below max. Go schedules
// goroutines without priorities and preempts a running one only after
// 10 ms, so a copy that started beside live work holds its core until it
// ends: the only way to keep copies off the answers' cores is not to
// start them there. Safe for concurrent use.
type shadowCapacity struct {
	max     int64
	n       atomic.Int64  // live predictions in flight
	waiting atomic.Bool   // the worker is waiting for n < max
	running atomic.Bool   // the worker is answering a copy
	idle    chan struct{} // a token sent when n falls below max
}

func newShadowCapacity(max int) *shadowCapacity {
	return &shadowCapacity{max: int64(max), idle: make(chan struct{}, 1)}
}

// begin counts a live prediction in flight.
func (c *shadowCapacity) begin() { c.n.Add(1) }

// end counts a live prediction done, and wakes the worker when a core
// becomes spare: a token on idle, never blocking.
func (c *shadowCapacity) end() {
	if c.n.Add(-1) == c.max-1 && c.waiting.Load() {
		select {
		case c.idle <- struct{}{}:
		default:
		}
	}
}

// wait returns true once fewer than max live predictions are in flight,
// looked at before and after yielding the processor (runtime.Gosched),
// so that goroutines ready to run, such as a request being read, run
// first and count if they become live predictions; or false when done is
// closed first.
func (c *shadowCapacity) wait(done <-chan struct{}) bool {
	if c.spare() {
		return true
	}
	c.waiting.Store(true)
	defer c.waiting.Store(false)
	// end reads waiting after its decrement, and we read n after setting
	// waiting: either we see its decrement or it sees us waiting and
	// sends a token. A stale token only makes us look again.
	for !c.spare() {
		select {
		case <-c.idle:
		case <-done:
			return false
		}
	}
	return true
}

// spare reports whether fewer than max live predictions are in flight,
// before and after yielding the processor.
func (c *shadowCapacity) spare() bool {
	if c.n.Load() >= c.max {
		return false
	}
	runtime.Gosched()
	return c.n.Load() < c.max
}

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
// request, makes feedback on it countable: with Options.FeedbackKey its
// request ID becomes a signed one (signID), else this server remembers
// its predictions under its request ID.
func (s *Server) answered(c echo.Context, sv *Servable, sc *scratch, n int, routed bool) {
	if sv.tel == nil {
		return
	}
	sv.tel.live.answers(sv, sc, n)
	if routed {
		h := c.Response().Header()
		if id := h[echo.HeaderXRequestID]; len(id) == 1 {
			if signed, ok := s.signID(id[0], sv, sc, n); ok {
				h[echo.HeaderXRequestID] = []string{signed}
			} else {
				s.feedback.remember(id[0], sv, sc, n)
			}
		}
	}
}

// enqueueShadow queues a copy of the :predict request (a V2 infer
// request if v2) in sc, which primary answered with n instances, for the
// shadow version, or drops it if the queue is full. It copies the body
// and one number per instance.
func (s *Server) enqueueShadow(shadow, primary *Servable, sc *scratch, n int, v2 bool) {
	if shadow.tel == nil {
		return
	}
	if len(s.shadowQ) == cap(s.shadowQ) {
		s.dropShadow(shadow)
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
	s.shadowPending.Add(1)
	select {
	case s.shadowQ <- j:
	default:
		s.shadowPending.Add(-1)
		s.dropShadow(shadow)
	}
}

// dropShadow counts a copy for shadow dropped because the queue is full,
// under shadowDropQueueFull if the worker is answering a copy, else
// shadowDropBusy, in the metrics and in shadow's telemetry.
func (s *Server) dropShadow(shadow *Servable) {
	reason := shadowDropBusy
	if s.capacity.running.Load() {
		reason = shadowDropQueueFull
	}
	s.metrics.shadowDropped[reason].Inc()
	shadow.tel.shadow.drop(reason)
}

// shadowCoalesce is the shortest rest of the shadow worker between two
// copies: copies that come meanwhile are queued with no receiver to wake.
// Waking a parked goroutine from a request's handler (a channel send to
// a waiting receiver) makes the runtime wake an idle thread for it, on
// the answer's path; resting makes that at most once per shadowCoalesce.
const shadowCoalesce = time.Millisecond

// shadowShare is the share of one core's time, in percent, the shadow
// worker's copies may take at most: after a copy that took d (wall
// time), the worker rests d·(100−shadowShare)/shadowShare, at least
// shadowCoalesce. A copy slowed by other work (the answers, other
// processes) takes longer and so buys a longer rest: the busier the
// machine, the fewer copies. Why 2: where the answers keep a fraction ρ
// of the cores busy, queueing delays grow about as 1/(1−ρ); work taking
// a further δ of the cores multiplies them by (1−ρ)/(1−ρ−δ), and 2% of
// one core on two (δ = 0.01) at half of peak (ρ = 0.5) makes that 1.02,
// within the rollout's bound of 1.05 on the p99 with room for the
// copies' other costs (rollout.md#shadow; 5% measured 1.044 over all
// rounds and 1.069 as a median of rounds, 2% 0.971 and 1.016).
const shadowShare = 2

// runShadow answers the queued copies with their shadow version until
// Close, each once a core is spare (shadowCapacity) and the worker has
// rested after the one before (shadowShare), counting them in the
// version's shadow counters; their answers go nowhere.
func (s *Server) runShadow() {
	rest := time.NewTimer(shadowCoalesce)
	defer rest.Stop()
	for {
		var j shadowJob
		select {
		case <-s.shadowDone:
			return
		case j = <-s.shadowQ:
		}
		if !s.capacity.wait(s.shadowDone) {
			return
		}
		s.capacity.running.Store(true)
		start := time.Now()
		s.shadowOne(j)
		d := time.Since(start)
		s.capacity.running.Store(false)
		s.shadowPending.Add(-1)
		rest.Reset(max(d*(100-shadowShare)/shadowShare, shadowCoalesce))
		select {
		case <-s.shadowDone:
			return
		case <-rest.C:
		}
	}
}

// shadowOne answers one copy. A panic is counted as a 500 and logged.
func (s *Server) shadowOne(j shadowJob) {
	if s.shadowHook != nil {
		s.shadowHook()
	}
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
