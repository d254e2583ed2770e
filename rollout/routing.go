package rollout

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrRouting is wrapped by every error about an invalid routing.
var ErrRouting = errors.New("rollout: invalid routing")

// MaxWeights bounds the versions one routing splits traffic between.
const MaxWeights = 8

// Weight is the share of a model's default traffic that one version
// answers, in whole percent (0–100).
type Weight struct {
	Version int64 `json:"version"`
	Percent int   `json:"percent"`
}

// Routing is how a model's requests that name no version or label are
// answered: by Weights' versions in proportion to their percents (summing
// to 100), and, if Shadow is not 0, a copy of each such request is also
// answered by the version Shadow, asynchronously and without changing the
// answer. The zero Routing (no weights) means: the default version
// answers everything.
//
// ShadowPercent, if not 0, copies only that percent of the routed
// requests (picked at random) to the shadow: each copy costs the server
// a second prediction, and on a busy machine a sample keeps that cost
// off the answers' latency. 0 copies every request.
type Routing struct {
	Weights       []Weight `json:"weights,omitempty"`
	Shadow        int64    `json:"shadow,omitempty"`
	ShadowPercent int      `json:"shadow_percent,omitempty"`
}

// IsZero reports whether r routes nothing (every request to the default).
func (r Routing) IsZero() bool { return len(r.Weights) == 0 && r.Shadow == 0 }

// Validate checks r: at most MaxWeights entries, each of a distinct
// positive version and a percent in 0–100, percents summing to 100; and,
// if versions is not nil, every version named (the shadow included) in
// versions. A routing with a shadow must have weights.
func (r Routing) Validate(versions []int64) error {
	if r.IsZero() {
		return nil
	}
	if len(r.Weights) == 0 {
		return fmt.Errorf("%w: shadow %d without weights", ErrRouting, r.Shadow)
	}
	if len(r.Weights) > MaxWeights {
		return fmt.Errorf("%w: %d weights, at most %d", ErrRouting, len(r.Weights), MaxWeights)
	}
	sum := 0
	for i, w := range r.Weights {
		switch {
		case w.Version <= 0:
			return fmt.Errorf("%w: weights[%d].version %d is not a positive version", ErrRouting, i, w.Version)
		case w.Percent < 0 || w.Percent > 100:
			return fmt.Errorf("%w: weights[%d].percent %d: want 0 to 100", ErrRouting, i, w.Percent)
		case slices.ContainsFunc(r.Weights[:i], func(o Weight) bool { return o.Version == w.Version }):
			return fmt.Errorf("%w: version %d named twice", ErrRouting, w.Version)
		case versions != nil && !slices.Contains(versions, w.Version):
			return fmt.Errorf("%w: version %d does not exist (have %v)", ErrRouting, w.Version, versions)
		}
		sum += w.Percent
	}
	if sum != 100 {
		return fmt.Errorf("%w: weights sum to %d, want 100", ErrRouting, sum)
	}
	if r.Shadow < 0 || (r.Shadow > 0 && versions != nil && !slices.Contains(versions, r.Shadow)) {
		return fmt.Errorf("%w: shadow version %d does not exist (have %v)", ErrRouting, r.Shadow, versions)
	}
	if r.ShadowPercent < 0 || r.ShadowPercent > 100 || (r.ShadowPercent != 0 && r.Shadow == 0) {
		return fmt.Errorf("%w: shadow_percent %d: want 0 to 100, with a shadow version", ErrRouting, r.ShadowPercent)
	}
	return nil
}

// Versions returns the versions r names, weights first, then the shadow.
func (r Routing) Versions() []int64 {
	var out []int64
	for _, w := range r.Weights {
		out = append(out, w.Version)
	}
	if r.Shadow != 0 && !slices.Contains(out, r.Shadow) {
		out = append(out, r.Shadow)
	}
	return out
}

// Percent returns the percent r gives version v (0 if it names none).
func (r Routing) Percent(v int64) int {
	for _, w := range r.Weights {
		if w.Version == v {
			return w.Percent
		}
	}
	return 0
}

// Pick returns the version that answers a request whose routing point is
// p in [0, 100): the weights are laid end to end in their order and p
// falls in one. r must be valid and not zero.
func (r Routing) Pick(p uint64) int64 {
	acc := uint64(0)
	for _, w := range r.Weights {
		acc += uint64(w.Percent)
		if p < acc {
			return w.Version
		}
	}
	return r.Weights[len(r.Weights)-1].Version
}

// String writes r for people: "1=90,2=10" plus " shadow=3" (and
// "@25%" for a shadow_percent); "default" for the zero Routing.
func (r Routing) String() string {
	if r.IsZero() {
		return "default"
	}
	var b strings.Builder
	for i, w := range r.Weights {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%d", w.Version, w.Percent)
	}
	if r.Shadow != 0 {
		fmt.Fprintf(&b, " shadow=%d", r.Shadow)
		if r.ShadowPercent != 0 && r.ShadowPercent != 100 {
			fmt.Fprintf(&b, "@%d%%", r.ShadowPercent)
		}
	}
	return b.String()
}

// ParseWeights parses "v1=90,v2=10" (the "v" is optional) into weights,
// in their order. It checks the syntax only; Validate checks the sums.
func ParseWeights(s string) ([]Weight, error) {
	var out []Weight
	for i, part := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%w: weight %d %q: want VERSION=PERCENT, e.g. v1=90", ErrRouting, i, part)
		}
		v, err := ParseVersion(k)
		if err != nil {
			return nil, err
		}
		p, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%w: weight of version %d: %q is not a whole percent", ErrRouting, v, val)
		}
		out = append(out, Weight{Version: v, Percent: p})
	}
	return out, nil
}

// ParseVersion parses a version written "3" or "v3".
func ParseVersion(s string) (int64, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: version %q: want a positive number such as 3 or v3", ErrRouting, s)
	}
	return v, nil
}
