package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/bless"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// Bless evaluates the export in.Bundle (of the job in.Owner, as Publish
// checks it) and the model's current default version on the same
// evaluation rows and applies the bless section in.Spec (package bless
// holds the evaluation and the rules). It stores the record with the
// candidate (bundle.WriteCandidateBlessing), where Publish reads it, and
// the verdict and a copy of the record come back to the workflow, which
// decides the promote. Thresholds that do not fit the
// model, a slice column of too many values, evaluation data outside the
// worker's roots or unreadable fail for good (InvalidSpec).
func (a *Activities) Bless(ctx context.Context, in workflows.BlessInput) (workflows.BlessResult, error) {
	defer keepAlive(ctx).Stop()
	jd, key, err := a.openExport(ctx, "bundle", in.Bundle, in.Owner, ownOrTrial)
	if err != nil {
		return workflows.BlessResult{}, err
	}
	defer jd.Close()
	if !bundle.ValidName(in.Model) {
		return workflows.BlessResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: model_name %q", jobspec.ErrInvalid, in.Model))
	}
	// The model's kind is not known yet: a spec valid for either kind
	// passes here, and bless.Judge checks the metrics against the model.
	if err := in.Spec.Validate(nil, false); err != nil && in.Spec.Validate(nil, true) != nil {
		return workflows.BlessResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	files := in.Eval
	if len(in.Spec.EvalData) > 0 {
		files = nil
		for i, f := range in.Spec.EvalData {
			loc, err := a.locateData(fmt.Sprintf("bless.eval_data[%d]", i), f)
			if err != nil {
				return workflows.BlessResult{}, err
			}
			files = append(files, loc)
		}
	}
	cand, err := bundle.Read(ctx, in.Bundle, a.ModelTypes)
	if err != nil {
		return workflows.BlessResult{}, fmt.Errorf("bless: %w", err)
	}
	bl, err := bless.Run(ctx, bless.Request{Model: in.Model, Candidate: cand, Repo: a.Models, EvalData: files, Spec: in.Spec,
		Types: a.ModelTypes, Log: infraLog.With("model", in.Model)})
	if errors.Is(err, bless.ErrSpec) || errors.Is(err, bless.ErrSlice) || errors.Is(err, preprocess.ErrRequest) {
		return workflows.BlessResult{}, nonRetryable(workflows.ErrTypeInvalidSpec, err)
	}
	if err != nil {
		return workflows.BlessResult{}, err
	}
	bl.JobID = in.JobID
	// The record Publish trusts is this one, stored with the candidate;
	// the result below is the workflow's copy, which a client completing
	// this activity by ID could forge.
	if err := bundle.WriteCandidateBlessing(ctx, jd.st.Sub(key), bl); err != nil {
		return workflows.BlessResult{}, fmt.Errorf("bless: %w", err)
	}
	return blessResult(bl)
}

// infraLog is the infra check's throwaway server's log: its warnings
// (a bundle it refuses to load) and errors only, not a line per request.
var infraLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "bless_infra")

// blessResult is the workflow's view of a blessing, with its record.
func blessResult(bl *bundle.Blessing) (workflows.BlessResult, error) {
	rec, err := bl.Marshal()
	if err != nil {
		return workflows.BlessResult{}, fmt.Errorf("bless: %w", err)
	}
	return workflows.BlessResult{Blessed: bl.Blessed, Baseline: bl.Baseline, NoBaseline: bl.NoBaseline, Reasons: bl.Reasons, Record: rec}, nil
}

// checkBlessing decodes the workflow's copy of a Bless step's record for
// the bundle b to publish: it must judge b itself, and the repository
// must keep blessings. Publish only checks it (a copy judging another
// bundle is refused); what it stores is the record Bless stored with the
// candidate (candidateBlessing).
func (a *Activities) checkBlessing(b *bundle.Bundle, record []byte) (*bundle.Blessing, error) {
	bl, err := bundle.ParseBlessing(record)
	if err != nil {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("publish: blessing: %w", err))
	}
	if bl.CandidateID != b.ID() {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("publish: the blessing judged bundle %q, not the one published (%s)", bl.CandidateID, b.ID()))
	}
	if _, ok := a.Models.(bundle.Blessings); !ok {
		return nil, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("publish: the model repository %s keeps no blessings", a.Models.Location()))
	}
	return bl, nil
}

// blessRule is what the spec of the job that publishes asks of a
// blessing before its version is published.
type blessRule struct {
	// required: the job blesses its candidate before it publishes it, so
	// Publish needs the record Bless stored with the candidate.
	required bool
	// ifBlessed: promote "if_blessed", so only a blessed record lets the
	// version become the default.
	ifBlessed bool
}

// runStart is the start of the workflow run that scheduled an activity,
// as the Temporal server recorded it (the run's first history event):
// its workflow type and, for a TrainingJob or HyperparameterTuningJob,
// the spec it started with (Decoded; false for another type or an input
// that does not decode).
type runStart struct {
	Type    string
	Spec    jobspec.JobSpec // as started, without defaults
	Decoded bool
}

// runStart returns the start of the run that scheduled the activity, nil
// without a client or outside an activity (tests, the worker's own
// tools). Unlike the activity's input, which the workflow computes from
// activity results that any Temporal client can complete by ID, the
// start input is the job's own spec: no client can change it once the
// run has started. Errors reading the history are retryable.
func (a *Activities) runStart(ctx context.Context) (*runStart, error) {
	if a.Client == nil || !activity.IsActivity(ctx) {
		return nil, nil
	}
	wf := activity.GetInfo(ctx).WorkflowExecution
	it := a.Client.GetWorkflowHistory(ctx, wf.ID, wf.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return nil, fmt.Errorf("the history of %s has no events", wf.ID)
	}
	ev, err := it.Next()
	if err != nil {
		return nil, fmt.Errorf("read the start of %s: %w", wf.ID, err)
	}
	start := ev.GetWorkflowExecutionStartedEventAttributes()
	if start == nil {
		return nil, fmt.Errorf("the first event of %s is not its start", wf.ID)
	}
	rs := &runStart{Type: start.GetWorkflowType().GetName()}
	dc := converter.GetDefaultDataConverter()
	switch rs.Type {
	case workflows.TrainingJobName:
		rs.Spec, _, err = workflows.DecodeTrainingInput(dc, start.GetInput())
		rs.Decoded = err == nil
	case workflows.HyperparameterTuningJobName:
		rs.Spec, _, err = workflows.DecodeTuningInput(dc, start.GetInput())
		rs.Decoded = err == nil
	}
	return rs, nil
}

// publishBlessRule returns what the job that scheduled Publish asks of a
// blessing, from that run's spec as the Temporal server recorded its
// start (rs, from runStart; nil without a client), never from in or any
// other value the workflow computed: those follow activity results, which
// a client completing Bless by ID could forge. A TrainingJob with a bless section blesses (an
// application's job does not: it has no Bless step); a tuning job never
// does (its spec may not have a bless section); a run of any other
// workflow type, or one whose input does not decode, is taken to bless.
// Without a client, or outside an activity, the workflow's copy of the
// record decides: a publish that carries one requires the stored record
// too (as it does in every case).
func publishBlessRule(rs *runStart, in workflows.PublishInput) blessRule {
	carried := len(in.Blessing) > 0
	switch {
	case rs == nil:
		return blessRule{required: carried}
	case !rs.Decoded:
		return blessRule{required: true}
	}
	spec := rs.Spec
	return blessRule{required: carried || (spec.Bless != nil && spec.Application == nil), ifBlessed: spec.Promote == jobspec.PromoteIfBlessed}
}

// candidateBlessing returns the record Bless stored with the candidate
// b (in st, a store opened at it), which Publish stores with the version:
// it must judge b itself as a version of in.Model, for the job in.JobID,
// and, when the publish makes the version the default under promote
// "if_blessed", bless it. Anything else is refused (InvalidSpec, not
// retried) before anything is published.
func (a *Activities) candidateBlessing(ctx context.Context, st *storage.Store, b *bundle.Bundle, in workflows.PublishInput, rule blessRule) (*bundle.Blessing, error) {
	refuse := func(err error) error { return nonRetryable(workflows.ErrTypeInvalidSpec, err) }
	bl, err := bundle.ReadCandidateBlessing(ctx, st)
	if errors.Is(err, bundle.ErrNotFound) {
		return nil, refuse(fmt.Errorf("no blessing record for candidate %s (bundle %s): refusing to publish with bless required", b.Dir, b.ID()))
	}
	if errors.Is(err, bundle.ErrBundle) {
		return nil, refuse(fmt.Errorf("the blessing record of candidate %s (bundle %s) is unreadable: refusing to publish with bless required: %w", b.Dir, b.ID(), err))
	}
	if err != nil {
		return nil, err
	}
	if err := bl.CheckCandidate(b, in.Model); err != nil {
		return nil, refuse(fmt.Errorf("no blessing record for candidate %s (bundle %s): refusing to publish with bless required: %w", b.Dir, b.ID(), err))
	}
	if bl.JobID != in.JobID {
		return nil, refuse(fmt.Errorf("no blessing record for candidate %s (bundle %s): refusing to publish with bless required: the record is job %q's, not %q's", b.Dir, b.ID(), bl.JobID, in.JobID))
	}
	if in.Promote && rule.ifBlessed && !bl.Blessed {
		return nil, refuse(fmt.Errorf("candidate %s (bundle %s) is not blessed (its blessing record: %s): refusing to make it the default of %s with promote \"if_blessed\"", b.Dir, b.ID(), strings.Join(bl.Reasons, "; "), in.Model))
	}
	if _, ok := a.Models.(bundle.Blessings); !ok {
		return nil, refuse(fmt.Errorf("publish: the model repository %s keeps no blessings", a.Models.Location()))
	}
	return bl, nil
}
