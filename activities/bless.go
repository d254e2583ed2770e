package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/trainflow/trainflow/bless"
	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// Bless evaluates the export in.Bundle (of the job in.Owner, as Publish
// checks it) and the model's current default version on the same
// evaluation rows and applies the bless section in.Spec (package bless
// holds the evaluation and the rules). The verdict and its record come
// back to the workflow, which decides the promote and hands the record
// to Publish to store with the version. Thresholds that do not fit the
// model, a slice column of too many values, evaluation data outside the
// worker's roots or unreadable fail for good (InvalidSpec).
func (a *Activities) Bless(ctx context.Context, in workflows.BlessInput) (workflows.BlessResult, error) {
	defer keepAlive(ctx).Stop()
	jd, _, err := a.openExport(ctx, "bundle", in.Bundle, in.Owner, ownOrTrial)
	if err != nil {
		return workflows.BlessResult{}, err
	}
	jd.Close()
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

// checkBlessing decodes the record a Bless step made for the bundle b to
// publish: it must judge b itself, and the repository must keep
// blessings.
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
