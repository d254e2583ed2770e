package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/rollout"
)

// HeaderRoutingKey is the request header whose value picks a routed
// request's version consistently: requests with the same key go to the
// same version as long as the routing stays the same. Without it the
// version is picked at random, by the routing's weights.
const HeaderRoutingKey = "X-Routing-Key"

// headerModelVersion is the response header naming the version that
// answered a prediction.
const headerModelVersion = "X-Model-Version"

// loadedRouting returns rt if every version it routes to is loaded;
// else the zero Routing (the default answers), or rt without its shadow
// if only the shadow is missing.
func loadedRouting(log *slog.Logger, model string, rt rollout.Routing, loaded map[int64]*Servable) rollout.Routing {
	for _, w := range rt.Weights {
		if loaded[w.Version] == nil && w.Percent > 0 {
			log.Error("routing names a version that is not loaded; serving the default", "model", model, "version", w.Version, "routing", rt.String())
			return rollout.Routing{}
		}
	}
	if rt.Shadow != 0 && loaded[rt.Shadow] == nil {
		log.Error("routing's shadow version is not loaded; no shadow", "model", model, "version", rt.Shadow)
		rt.Shadow = 0
	}
	return rt
}

// Route returns the version that answers a request to model that names
// no version or label, and the shadow version that answers a copy (nil if
// none, or the request is not among the routing's ShadowPercent): by the model's routing, the point in [0, 100) picked by the
// FNV-1a hash of key, or at random if key is empty; the default version
// if the model has no routing. routed reports whether a routing decided.
func (r *Registry) Route(model, key string) (sv, shadow *Servable, routed bool, err error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	mv := r.models[model]
	if mv == nil {
		return nil, nil, false, fmt.Errorf("%w: model %q is not loaded", ErrNotFound, model)
	}
	if len(mv.routing.Weights) == 0 {
		if sv = mv.versions[mv.def]; sv == nil {
			return nil, nil, false, fmt.Errorf("%w: model %q has no loaded version %d", ErrNotFound, model, mv.def)
		}
		return sv, nil, false, nil
	}
	var p uint64
	if key == "" {
		p = rand.Uint64N(100)
	} else {
		p = fnv64a(key) % 100
	}
	v := mv.routing.Pick(p)
	sv = mv.versions[v]
	if sp := mv.routing.ShadowPercent; mv.routing.Shadow != 0 && mv.routing.Shadow != v && (sp == 0 || sp == 100 || rand.Uint64N(100) < uint64(sp)) {
		shadow = mv.versions[mv.routing.Shadow]
	}
	return sv, shadow, true, nil
}

// fnv64a is the 64-bit FNV-1a hash of s (hash/fnv's, without its
// allocation).
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Routing returns the routing model's requests follow on this server (the
// zero Routing if none, or the model is not loaded).
func (r *Registry) Routing(model string) rollout.Routing {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if mv := r.models[model]; mv != nil {
		return mv.routing
	}
	return rollout.Routing{}
}

// versionTel counts what one loaded bundle of a version answers, live
// and as a shadow. Safe for concurrent use.
type versionTel struct {
	model   string
	version int64
	classes []string // the bundle's classes, by index; nil: a regressor
	live    telCounters
	shadow  telCounters
}

// telCounters are the atomic form of rollout.Stats.
type telCounters struct {
	requests, errors, rows atomic.Int64
	compared, agreed       atomic.Int64
	labelled, correct      atomic.Int64
	dropped                [2]atomic.Int64  // by reason, as rollout.ShadowDropReasons
	latency                [65]atomic.Int64 // len(rollout.LatencyBounds)+1
	classes                []atomic.Int64   // by class index
	momentsMu              sync.Mutex
	sum, sumSq             float64
	values                 map[int]int64 // rollout.ValueBucket → rows, under momentsMu
}

// telFor returns the counters of s's bundle, made on its first load.
func (r *Registry) telFor(s *Servable) *versionTel {
	key := fmt.Sprintf("%s/%d/%s", s.Model, s.Version, s.Bundle.ID())
	r.telMu.Lock()
	defer r.telMu.Unlock()
	if t := r.tel[key]; t != nil {
		return t
	}
	t := &versionTel{model: s.Model, version: s.Version}
	if n := s.Bundle.Model.NumClasses(); n > 0 {
		t.classes = s.Transform.LabelVocab
		t.live.classes = make([]atomic.Int64, n)
		t.shadow.classes = make([]atomic.Int64, n)
	}
	r.tel[key] = t
	return t
}

// observe counts one request answered with status code in d.
func (c *telCounters) observe(code int, d time.Duration) {
	c.requests.Add(1)
	if code >= 500 {
		c.errors.Add(1)
	}
	c.latency[rollout.LatencyBucket(d)].Add(1)
}

// drop counts a copy for the shadow version dropped for reason (one of
// rollout.ShadowDropReasons).
func (c *telCounters) drop(reason string) {
	if i := slices.Index(rollout.ShadowDropReasons, reason); i >= 0 && i < len(c.dropped) {
		c.dropped[i].Add(1)
	}
}

// answers counts the n rows of sc after predict.
func (c *telCounters) answers(sv *Servable, sc *scratch, n int) {
	c.rows.Add(int64(n))
	if k := sv.Bundle.Model.NumClasses(); k > 0 {
		if len(c.classes) != k {
			return
		}
		for i := range n {
			c.classes[argmax(sc.probs[i*k:(i+1)*k])].Add(1)
		}
		return
	}
	k := sv.Bundle.Model.Outputs()
	var sum, sq float64
	c.momentsMu.Lock()
	defer c.momentsMu.Unlock()
	if c.values == nil {
		c.values = map[int]int64{}
	}
	for i := range n {
		z := sc.logits[i*k]
		sum, sq = sum+z, sq+z*z
		if b, ok := rollout.ValueBucket(z); ok {
			c.values[b]++
		}
	}
	c.sum, c.sumSq = c.sum+sum, c.sumSq+sq
}

// argmax is train.Argmax without the import cycle risk: the first index
// of the largest value.
func argmax(p []float64) int {
	best := 0
	for i, x := range p {
		if x > p[best] {
			best = i
		}
	}
	return best
}

// stats reads the counters as rollout.Stats with the class names names.
func (c *telCounters) stats(names []string) rollout.Stats {
	s := rollout.Stats{
		Requests: c.requests.Load(), Errors: c.errors.Load(), Rows: c.rows.Load(),
		Compared: c.compared.Load(), Agreed: c.agreed.Load(), Labelled: c.labelled.Load(), Correct: c.correct.Load(),
		Latency: make([]int64, len(c.latency)),
	}
	for i := range c.latency {
		s.Latency[i] = c.latency[i].Load()
	}
	for i := range c.dropped {
		if n := c.dropped[i].Load(); n > 0 {
			if s.Dropped == nil {
				s.Dropped = map[string]int64{}
			}
			s.Dropped[rollout.ShadowDropReasons[i]] = n
		}
	}
	for i := range c.classes {
		if n := c.classes[i].Load(); n > 0 {
			if s.Classes == nil {
				s.Classes = map[string]int64{}
			}
			s.Classes[names[i]] += n
		}
	}
	c.momentsMu.Lock()
	s.Sum, s.SumSq = c.sum, c.sumSq
	if len(c.values) > 0 {
		s.Values = maps.Clone(c.values)
	}
	c.momentsMu.Unlock()
	return s
}

// Telemetry returns this server's counters of model per version since the
// registry was made, as a record for the model repository.
func (r *Registry) Telemetry(server, model string, now time.Time) rollout.Telemetry {
	t := rollout.Telemetry{Server: server, Boot: r.boot.UTC(), Time: now.UTC(), Versions: map[string]rollout.VersionStats{}}
	r.telMu.Lock()
	tels := make([]*versionTel, 0, len(r.tel))
	for _, vt := range r.tel {
		if vt.model == model {
			tels = append(tels, vt)
		}
	}
	r.telMu.Unlock()
	for _, vt := range tels {
		k := bundle.VersionKey(vt.version)
		vs := t.Versions[k]
		vs.Live.Add(vt.live.stats(vt.classes))
		vs.Shadow.Add(vt.shadow.stats(vt.classes))
		t.Versions[k] = vs
	}
	return t
}

// TelemetrySink is where a server reports its counters: the model
// repository (bundle.Store.WriteTelemetry).
type TelemetrySink interface {
	WriteTelemetry(ctx context.Context, model string, t rollout.Telemetry) error
}

// ReportTelemetry writes, every interval until ctx is done, this server's
// telemetry record of each loaded model whose counters changed since its
// last write, as server (a bundle.ValidName unique to this process), to
// sink. A failed write is logged and tried again at the next tick.
func (r *Registry) ReportTelemetry(ctx context.Context, sink TelemetrySink, server string, interval time.Duration) {
	last := map[string]string{}
	every(ctx, interval, func() {
		for _, model := range r.Models() {
			t := r.Telemetry(server, model, time.Now())
			counts, _ := json.Marshal(t.Versions)
			if last[model] == string(counts) {
				continue
			}
			if err := sink.WriteTelemetry(ctx, model, t); err != nil {
				if ctx.Err() == nil {
					r.log.Error("report telemetry", "model", model, "error", err)
				}
				continue
			}
			last[model] = string(counts)
		}
	})
}

// NewServerID returns a name for this process's telemetry record:
// prefix (letters, digits and '_' kept, others dropped) and 8 random hex
// digits, a bundle.ValidName.
func NewServerID(prefix string) string {
	b := []byte("srv_")
	for _, c := range []byte(prefix) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' {
			b = append(b, c)
		}
	}
	b = b[:min(len(b), 100)]
	id := fmt.Sprintf("%s_%08x", b, rand.Uint32())
	if !bundle.ValidName(id) {
		return fmt.Sprintf("srv_%08x", rand.Uint32())
	}
	return id
}
