package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// OwnerFile is a model's owner record, <model>/owner.json: the job that
// published the model's first version. It is written once, before that
// version, and never changed by a publish (see docs/ownership.md).
const OwnerFile = "owner.json"

// Publisher is the job that publishes a version: its job ID and the run
// ID of its first run, which the Temporal server generates (a job ID is
// the client's choice; a first run ID is not).
type Publisher struct {
	JobID      string `json:"job_id"`
	FirstRunID string `json:"first_run_id,omitempty"`
}

// ErrNotOwner is wrapped by a publish refused by the model's owner rule.
var ErrNotOwner = errors.New("bundle: model belongs to another job")

// Rule is the operator's rule for who, besides the model's owner, may
// publish a version into an existing model or promote one (make it the
// default, the version served to requests that name none): anyone
// (Open), or the jobs whose IDs match one of Jobs (path.Match patterns
// such as "census_*"). Other jobs may add versions that are not the
// default (a retraining job is served only when asked for by version
// until someone allowed promotes it), unless OwnerOnly refuses them that
// too. The zero Rule ("versions"): any job adds versions, only the owner
// promotes.
//
// Job IDs are chosen by whoever starts the job, so a pattern keeps apart
// clients that follow the operator's naming, not clients that lie; the
// owner's first run ID is what no client can choose.
type Rule struct {
	Open bool
	// OwnerOnly refuses other jobs' versions too ("owner").
	OwnerOnly bool
	Jobs      []string
}

// String renders r as ParseRules reads it.
func (r Rule) String() string {
	switch {
	case r.Open:
		return "open"
	case len(r.Jobs) > 0:
		return strings.Join(r.Jobs, "|")
	case r.OwnerOnly:
		return "owner"
	}
	return "versions"
}

// allows reports whether r lets jobID publish into another job's model,
// promoting (setting the default) if promote.
func (r Rule) allows(jobID string, promote bool) bool {
	if r.Open {
		return true
	}
	for _, p := range r.Jobs {
		if ok, _ := path.Match(p, jobID); ok {
			return true
		}
	}
	return !promote && !r.OwnerOnly && len(r.Jobs) == 0
}

// Rules are the operator's rules by model name; "*" applies to models
// without their own.
type Rules map[string]Rule

// For returns the rule of model.
func (rs Rules) For(model string) Rule {
	if r, ok := rs[model]; ok {
		return r
	}
	return rs["*"]
}

// ParseRules parses rules written MODEL=RULE, comma-separated: MODEL a
// model name or "*", RULE "versions" (the default: any job adds versions,
// the owner alone promotes), "owner" (the owner alone publishes),
// "open" or job ID patterns separated by '|' (e.g. census=census_*|nightly_*:
// the owner and those jobs publish and promote; no other job publishes).
func ParseRules(s string) (Rules, error) {
	rs := Rules{}
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		model, rule, ok := strings.Cut(e, "=")
		if !ok || (model != "*" && !ValidName(model)) {
			return nil, fmt.Errorf("%q: want MODEL=RULE, MODEL a model name or *", e)
		}
		if _, dup := rs[model]; dup {
			return nil, fmt.Errorf("%q: model %s has a rule already", e, model)
		}
		var r Rule
		switch rule {
		case "open":
			r.Open = true
		case "owner":
			r.OwnerOnly = true
		case "versions":
		default:
			for _, p := range strings.Split(rule, "|") {
				if _, err := path.Match(p, ""); err != nil || p == "" || strings.ContainsAny(p, "/\\") {
					return nil, fmt.Errorf("%q: %q is not open, owner or a job ID pattern such as census_*", e, p)
				}
				r.Jobs = append(r.Jobs, p)
			}
		}
		rs[model] = r
	}
	return rs, nil
}

// owner returns the owner of model: its owner record, else (a model
// published before owner records) the job of its lowest version, whose
// first run is not known. ok is false for a model with neither.
func (r *Store) owner(ctx context.Context, model string, vs []int64) (o Publisher, ok bool, err error) {
	b, err := r.read(ctx, model+"/"+OwnerFile)
	if err == nil {
		if json.Unmarshal(b, &o) != nil || o.JobID == "" {
			return o, false, fmt.Errorf("publish: the owner record of model %s does not decode", model)
		}
		return o, true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return o, false, fmt.Errorf("publish: owner of %s: %w", model, err)
	}
	for _, v := range vs {
		var s source
		raw, err := r.read(ctx, versionKey(model, v)+"/"+SourceFile)
		if err == nil && json.Unmarshal(raw, &s) == nil && s.JobID != "" {
			return Publisher{JobID: s.JobID}, true, nil
		}
	}
	return o, false, nil
}

// Owner returns the owner of model (see Repository.Owner).
func (r *Store) Owner(ctx context.Context, model string) (Publisher, bool, error) {
	if !ValidName(model) {
		return Publisher{}, false, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return Publisher{}, false, err
	}
	return r.owner(ctx, model, vs)
}

// is reports whether p is the owner o: the same job ID, and the same first
// run when the record has one.
func (o Publisher) is(p Publisher) bool {
	return o.JobID == p.JobID && (o.FirstRunID == "" || o.FirstRunID == p.FirstRunID)
}

// checkOwner lets by publish into model (versions vs) under rule, claiming
// the model for by when nobody owns it: it returns an error wrapping
// ErrNotOwner when the model is another job's and rule does not allow by.
func (r *Store) checkOwner(ctx context.Context, model string, vs []int64, by Publisher, rule Rule, promote bool) error {
	o, ok, err := r.owner(ctx, model, vs)
	if err != nil {
		return err
	}
	if !ok {
		if o, err = r.claimModel(ctx, model, by); err != nil {
			return err
		}
	}
	if o.is(by) || rule.allows(by.JobID, promote) {
		return nil
	}
	return notOwner(model, o, rule, by.JobID)
}

// CheckPublisher reports, without writing anything, whether job jobID may
// publish into model (with promote: and give the version traffic) under
// rule, given the model's owner o (owned false: nobody owns it yet, and
// the job's first publish would claim it). If not, the error wraps
// ErrNotOwner, worded as PublishAs words its refusal. PrepareJob asks it
// of a spec that promotes or rolls out, so that a job that could never do
// so is refused before it trains; PublishAs stays the check that counts.
func CheckPublisher(model string, o Publisher, owned bool, jobID string, rule Rule, promote bool) error {
	if !owned || o.JobID == jobID || rule.allows(jobID, promote) {
		return nil
	}
	return notOwner(model, o, rule, jobID)
}

// notOwner is the refusal of job jobID by model's owner o under rule.
func notOwner(model string, o Publisher, rule Rule, jobID string) error {
	var shown string
	switch {
	case len(rule.Jobs) > 0:
		shown = "lets the owner and jobs matching " + rule.String() + " publish and promote"
	case rule.OwnerOnly:
		shown = "lets its owner alone publish"
	default:
		shown = "lets any job add versions but its owner alone promote (publish without promote to add a version)"
	}
	return fmt.Errorf("%w: model %s belongs to job %s; the operator's rule for it %s, not job %s (worker --model-owners %s=PATTERN|open allows more)",
		ErrNotOwner, model, o.JobID, shown, jobID, model)
}

// claimModel writes model's owner record for by unless one exists (a
// local repository creates it exclusively: of two first publishes, one
// wins), and returns the record the model has afterwards.
func (r *Store) claimModel(ctx context.Context, model string, by Publisher) (Publisher, error) {
	b, _ := json.Marshal(by)
	key := model + "/" + OwnerFile
	if root, ok := r.st.LocalDir(); ok {
		err := createExclusive(filepath.Join(root, model), OwnerFile, b, 0)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return Publisher{}, fmt.Errorf("publish: claim model %s: %w", model, err)
		}
	} else if err := r.st.Write(ctx, key, b); err != nil { // one publisher of a model at a time in object storage
		return Publisher{}, fmt.Errorf("publish: claim model %s: %w", model, err)
	}
	o, ok, err := r.owner(ctx, model, nil)
	if err == nil && !ok {
		err = fmt.Errorf("publish: claim model %s: no owner record after writing it", model)
	}
	return o, err
}

// createExclusive writes dir/name with b, complete, unless it exists
// (fs.ErrExist): the content goes to a temporary file first, which is
// then linked to the name (link fails on an existing name). A perm other
// than 0 is the file's mode, set before the content is written (a
// secret is never readable by others); 0 leaves atomicfile.CreateTemp's.
func createExclusive(dir, name string, b []byte, perm os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := atomicfile.CreateTemp(dir)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if perm != 0 {
		err = f.Chmod(perm)
	}
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(f.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return atomicfile.SyncDir(dir)
}

// String renders rs as ParseRules reads it, models sorted.
func (rs Rules) String() string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(rs)) {
		out = append(out, m+"="+rs[m].String())
	}
	return strings.Join(out, ",")
}
