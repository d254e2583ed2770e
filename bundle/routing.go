package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/trainflow/trainflow/rollout"
)

// Keys of a model's routing, its history and its servers' telemetry,
// under <model>/ (see the package documentation).
const (
	// RoutingFile is <model>/routing.json: a rollout.Routing.
	RoutingFile = "routing.json"
	// HistoryDir holds one Change per routing or default change,
	// <model>/history/<unix nanoseconds, 20 digits>-<8 hex>.json, never
	// rewritten: the model's append-only audit trail.
	HistoryDir = "history"
	// TelemetryDir holds one rollout.Telemetry per prediction server,
	// <model>/telemetry/<server>.json, rewritten by that server.
	TelemetryDir = "telemetry"
)

// MaxHistory bounds the history records History reads (the newest).
const MaxHistory = 10000

// Cause says who or what changed a routing: By is a user ("cli:alice")
// or "rollout"; JobID the rollout's workflow ID, Step its step ("25",
// "shadow", "rollback"); Reason free text (a failed gate's); Gates the
// gate values the change was decided on.
type Cause struct {
	// By is who made the change: a verified principal when Verified
	// ("operator:KEY", "job:JOB_ID" of a rollout), else what the writer
	// typed (a CLI's --by, a rollout from before verification).
	By string `json:"by"`
	// Verified says a worker checked By (the operator's signature, or the
	// parent the Temporal server recorded). Records written before it
	// have none.
	Verified bool `json:"verified,omitempty"`
	// Note is what the starter typed as "by", kept as a note only.
	Note string `json:"note,omitempty"`
	// Say is the nonce of the operator's say a rollout started with, and
	// Run the rollout's first run ID: a say is good for one run chain.
	Say    string          `json:"say,omitempty"`
	Run    string          `json:"run,omitempty"`
	JobID  string          `json:"job_id,omitempty"`
	Step   string          `json:"step,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Gates  *rollout.Values `json:"gates,omitempty"`
	// Caller is who started the rollout as the Temporal server
	// authenticated it ("trainflow-user:alice"), read by the worker from
	// the start event's principal; empty on a server without
	// authorization and in records written before it.
	Caller string `json:"caller,omitempty"`
}

// Change is one record of a model's history: at Time the routing went
// from Old to New (and, if NewDefault is not 0, the default version from
// OldDefault to NewDefault), because of Cause.
type Change struct {
	Time       time.Time       `json:"time"`
	Old        rollout.Routing `json:"old"`
	New        rollout.Routing `json:"new"`
	OldDefault int64           `json:"old_default,omitempty"`
	NewDefault int64           `json:"new_default,omitempty"`
	Cause      Cause           `json:"cause"`
}

// What says what c changed, for people (models history, the console):
// "OLD → NEW" for a routing, or the default's change and the routing it
// cleared.
func (c Change) What() string {
	if c.NewDefault != 0 {
		return fmt.Sprintf("default %d → %d (routing %s cleared)", c.OldDefault, c.NewDefault, c.Old)
	}
	return fmt.Sprintf("%s → %s", c.Old, c.New)
}

// Routing reads a model's routing.json; a model without one has the zero
// Routing (its default answers everything). A file that does not parse
// or validate (syntax only: versions are checked when it is written) is
// an error.
func (r *Store) Routing(ctx context.Context, model string) (rollout.Routing, error) {
	var rt rollout.Routing
	if !ValidName(model) {
		return rt, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	b, err := r.read(ctx, model+"/"+RoutingFile)
	if errors.Is(err, fs.ErrNotExist) {
		return rt, nil
	}
	if err != nil {
		return rt, fmt.Errorf("routing of %s: %w", model, err)
	}
	if err := json.Unmarshal(b, &rt); err != nil {
		return rt, fmt.Errorf("routing of %s: %w", model, err)
	}
	if err := rt.Validate(nil); err != nil {
		return rt, fmt.Errorf("routing of %s: %w", model, err)
	}
	return rt, nil
}

// SetRouting makes rt the routing of model, after checking it against the
// model's versions, and appends the change to its history. The zero
// Routing removes routing.json. It is idempotent: when rt is already the
// routing and the newest history record has the same cause (a retried
// activity), nothing is written and that record is returned.
func (r *Store) SetRouting(ctx context.Context, model string, rt rollout.Routing, cause Cause, now time.Time) (Change, error) {
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return Change{}, err
	}
	if len(vs) == 0 {
		return Change{}, fmt.Errorf("%w: model %q has no versions", ErrNotFound, model)
	}
	if err := rt.Validate(vs); err != nil {
		return Change{}, fmt.Errorf("routing of %s: %w", model, err)
	}
	old, err := r.Routing(ctx, model)
	if err != nil {
		return Change{}, err
	}
	ch := Change{Time: now.UTC(), Old: old, New: rt, Cause: cause}
	if same, last, err := r.repeated(ctx, model, ch); err != nil || same {
		return last, err
	}
	key := model + "/" + RoutingFile
	if rt.IsZero() {
		err = r.st.Delete(ctx, key)
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	} else {
		b, _ := json.Marshal(rt)
		err = r.st.Write(ctx, key, b)
	}
	if err != nil {
		return Change{}, fmt.Errorf("set routing of %s: %w", model, err)
	}
	return ch, r.appendHistory(ctx, model, ch)
}

// Promote makes version the default of model and clears its routing, in
// that order (a server between the two writes routes as before, to
// versions that exist), recording one Change. Idempotent as SetRouting.
func (r *Store) Promote(ctx context.Context, model string, version int64, cause Cause, now time.Time) (Change, error) {
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return Change{}, err
	}
	if err := (rollout.Routing{Weights: []rollout.Weight{{Version: version, Percent: 100}}}).Validate(vs); err != nil {
		return Change{}, fmt.Errorf("promote %s: %w", model, err)
	}
	old, err := r.Routing(ctx, model)
	if err != nil {
		return Change{}, err
	}
	def, err := r.Default(ctx, model)
	if err != nil {
		return Change{}, err
	}
	ch := Change{Time: now.UTC(), Old: old, OldDefault: def, NewDefault: version, Cause: cause}
	if same, last, err := r.repeated(ctx, model, ch); err != nil || same {
		return last, err
	}
	if err := r.setDefault(ctx, model, version); err != nil {
		return Change{}, err
	}
	if err := r.st.Delete(ctx, model+"/"+RoutingFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Change{}, fmt.Errorf("promote %s: %w", model, err)
	}
	return ch, r.appendHistory(ctx, model, ch)
}

// repeated reports whether ch repeats the newest history record (same
// routing, default and cause), which it returns.
func (r *Store) repeated(ctx context.Context, model string, ch Change) (bool, Change, error) {
	keys, err := r.historyKeys(ctx, model)
	if err != nil || len(keys) == 0 {
		return false, Change{}, err
	}
	last, err := r.readChange(ctx, keys[len(keys)-1])
	if err != nil {
		return false, Change{}, err
	}
	// The caller is read from the server at each attempt, and may be
	// missing from one: it does not make a retry another change.
	a, b := last.Cause, ch.Cause
	a.Caller, b.Caller = "", ""
	same := reflect.DeepEqual(last.New, ch.New) && last.NewDefault == ch.NewDefault && reflect.DeepEqual(a, b)
	return same, last, nil
}

// appendHistory writes ch as a new history record.
func (r *Store) appendHistory(ctx context.Context, model string, ch Change) error {
	b, _ := json.Marshal(ch)
	sum := sha256.Sum256(b)
	key := fmt.Sprintf("%s/%s/%020d-%s.json", model, HistoryDir, ch.Time.UnixNano(), hex.EncodeToString(sum[:4]))
	if err := r.st.Write(ctx, key, b); err != nil {
		return fmt.Errorf("history of %s: %w", model, err)
	}
	return nil
}

func (r *Store) historyKeys(ctx context.Context, model string) ([]string, error) {
	keys, err := r.st.List(ctx, model+"/"+HistoryDir+"/")
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", model, err)
	}
	out := keys[:0]
	for _, k := range keys {
		if strings.HasSuffix(k, ".json") {
			out = append(out, k)
		}
	}
	return out, nil // List sorts, and the keys start with fixed-width times
}

func (r *Store) readChange(ctx context.Context, key string) (Change, error) {
	var ch Change
	b, err := r.read(ctx, key)
	if err != nil {
		return ch, fmt.Errorf("history record %s: %w", key, err)
	}
	if err := json.Unmarshal(b, &ch); err != nil {
		return ch, fmt.Errorf("history record %s: %w", key, err)
	}
	return ch, nil
}

// History returns a model's routing changes, oldest first (at most the
// newest MaxHistory). A record that does not parse is an error.
func (r *Store) History(ctx context.Context, model string) ([]Change, error) {
	if !ValidName(model) {
		return nil, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	keys, err := r.historyKeys(ctx, model)
	if err != nil {
		return nil, err
	}
	keys = keys[max(0, len(keys)-MaxHistory):]
	out := make([]Change, 0, len(keys))
	for _, k := range keys {
		ch, err := r.readChange(ctx, k)
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// WriteTelemetry replaces the telemetry record of server t.Server for
// model. The server name follows ValidName.
func (r *Store) WriteTelemetry(ctx context.Context, model string, t rollout.Telemetry) error {
	if !ValidName(model) || !ValidName(t.Server) {
		return fmt.Errorf("telemetry: invalid model %q or server %q", model, t.Server)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("telemetry of %s: %w", model, err)
	}
	return r.st.Write(ctx, model+"/"+TelemetryDir+"/"+t.Server+".json", b)
}

// Telemetry reads every server's telemetry record of model, sorted by
// server. A record that does not parse is an error.
func (r *Store) Telemetry(ctx context.Context, model string) ([]rollout.Telemetry, error) {
	if !ValidName(model) {
		return nil, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	keys, err := r.st.List(ctx, model+"/"+TelemetryDir+"/")
	if err != nil {
		return nil, fmt.Errorf("telemetry of %s: %w", model, err)
	}
	var out []rollout.Telemetry
	for _, k := range keys {
		if !strings.HasSuffix(k, ".json") {
			continue
		}
		b, err := r.read(ctx, k)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var t rollout.Telemetry
		if err == nil {
			err = json.Unmarshal(b, &t)
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry record %s: %w", k, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// VersionKey is the key of a version in rollout.Telemetry.Versions: its
// number in decimal.
func VersionKey(v int64) string { return strconv.FormatInt(v, 10) }

// CheckPromote reports whether version of model may take traffic as a
// rollout or a promote would give it, under the operator's rule for the
// model: the job that published it (its source.json) must be the model's
// owner or a job rule lets promote, as PublishAs with promote requires.
// Otherwise the error wraps ErrNotOwner. A model nobody owns allows it.
func (r *Store) CheckPromote(ctx context.Context, model string, version int64, rule Rule) error {
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return err
	}
	o, ok, err := r.owner(ctx, model, vs)
	if err != nil || !ok {
		return err
	}
	var s source
	raw, err := r.read(ctx, versionKey(model, version)+"/"+SourceFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err == nil {
		json.Unmarshal(raw, &s)
	}
	if (s.JobID != "" && s.JobID == o.JobID) || rule.allows(s.JobID, true) {
		return nil
	}
	return fmt.Errorf("%w: version %d of model %s was published by job %q, and the operator's rule for the model (%s) lets only its owner %s promote: it may not take traffic (worker --model-owners %s=PATTERN|open allows more)",
		ErrNotOwner, version, model, s.JobID, rule, o.JobID, model)
}
