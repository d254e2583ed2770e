package workflows

import (
	"encoding/json"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobspec"
)

// carryChange marks the move of Carry out of the JobSpec: a run continued
// from then on gets it as TrainingJob's second argument; runs continued
// before got it inside the spec (jobInput.Carry), which is still read.
const carryChange = "carry-out-of-spec"

// jobInput is TrainingJob's first argument: a JobSpec as typed in the UI
// or sent by the CLI. Carry is read only from runs continued before
// carryChange, which carried it inside the spec's JSON; it is not part of
// the JobSpec and never written any more.
type jobInput struct {
	jobspec.JobSpec
	Carry *Carry `json:"carry,omitempty"`
	inputErrors
}

// UnmarshalJSON decodes the input strictly (DecodeSpec's rules; the carry
// of an older run is not checked) and keeps what is wrong for the
// workflow to refuse, instead of failing the decoding: a workflow whose
// input fails to decode fails with the decoder's internals, as a
// retryable error.
func (in *jobInput) UnmarshalJSON(b []byte) error {
	type plain jobInput
	in.inputErrors = decodeInputJSON(b, (*plain)(in), "carry")
	return nil
}

// split returns the spec and the carry inside it (nil: none).
func (in jobInput) split() (jobspec.JobSpec, *Carry) { return in.JobSpec, in.Carry }

// inputErrors is what decoding a workflow's input found wrong.
type inputErrors struct {
	// strict is DecodeSpec's error: an unknown field or a wrong type.
	strict error
	// lenient is encoding/json's error (a wrong type): the error such an
	// input failed with before strictSpecChange.
	lenient error
}

func (e inputErrors) inputErrs() inputErrors { return e }

// decodeInputJSON decodes b into v strictly, and when that fails, again
// as encoding/json does (unknown fields ignored).
func decodeInputJSON(b []byte, v any, skip ...string) inputErrors {
	strict := jobspec.DecodeStrict(b, v, skip...)
	if strict == nil {
		return inputErrors{}
	}
	return inputErrors{strict: strict, lenient: json.Unmarshal(b, v)}
}

// strictSpecChange marks the refusal of inputs with unknown fields or
// wrong types as InvalidSpec: runs started before it ignored unknown
// fields and failed on a wrong type with encoding/json's error.
const strictSpecChange = "strict-spec"

// checkInput returns the error a run fails with for what decoding its
// input found wrong (nil: nothing).
func checkInput(ctx workflow.Context, e inputErrors) error {
	if e.strict == nil {
		return nil
	}
	if workflow.GetVersion(ctx, strictSpecChange, workflow.DefaultVersion, 1) >= 1 {
		return temporal.NewNonRetryableApplicationError(e.strict.Error(), ErrTypeInvalidSpec, nil)
	}
	return e.lenient
}

// carryOwnChange marks the refusal of a carry in a run that is not a
// continue-as-new: only a job's own continue-as-new hands one over (a
// carry typed into the UI form, or sent as a start's second argument,
// would skip PrepareJob's claim of the job directory).
const carryOwnChange = "carry-only-continued"

// checkCarry refuses a carry (non-nil has) unless this run continues an
// earlier one: the server sets that, no client can.
func checkCarry(ctx workflow.Context, has bool) error {
	if !has || workflow.GetInfo(ctx).ContinuedExecutionRunID != "" {
		return nil
	}
	if workflow.GetVersion(ctx, carryOwnChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	err := fmt.Errorf("%w: carry: only a job's own continue-as-new hands a carry over; a new start cannot", jobspec.ErrInvalid)
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
}

// legacyInput is a workflow's first argument with the carry that runs
// continued before carryChange had inside it (jobInput, tuningInput).
type legacyInput[C any] interface {
	split() (jobspec.JobSpec, *C)
	inputErrs() inputErrors
}

// resolve returns the spec of input in and the carry of the run: carry
// (the second argument), else the one inside in.
func resolve[I legacyInput[C], C any](in I, carry *C) (jobspec.JobSpec, *C) {
	spec, legacy := in.split()
	if carry == nil {
		carry = legacy
	}
	return spec, carry
}

// decodeInput decodes a workflow's input, in either form.
func decodeInput[I legacyInput[C], C any](dc converter.DataConverter, payloads *commonpb.Payloads) (jobspec.JobSpec, *C, error) {
	var in I
	var carry *C
	if err := dc.FromPayloads(payloads, &in, &carry); err != nil {
		return jobspec.JobSpec{}, nil, err
	}
	if err := in.inputErrs().lenient; err != nil {
		return jobspec.JobSpec{}, nil, err
	}
	spec, carry := resolve(in, carry)
	return spec, carry, nil
}

// continueAsNew continues the job as a new run that resumes from carry:
// spec and carry as two arguments, or, in a run that began before
// carryChange, carry inside the spec as such runs did.
func continueAsNew(ctx workflow.Context, spec jobspec.JobSpec, carry *Carry) error {
	if workflow.GetVersion(ctx, carryChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return workflow.NewContinueAsNewError(ctx, TrainingJobName, jobInput{JobSpec: spec, Carry: carry})
	}
	return workflow.NewContinueAsNewError(ctx, TrainingJobName, spec, carry)
}

// DecodeTrainingInput decodes the input of a TrainingJob run (its
// WorkflowExecutionStarted event or a continue-as-new): the spec and, for
// a continued run, what the earlier runs carried (nil otherwise), in
// either form continueAsNew writes.
func DecodeTrainingInput(dc converter.DataConverter, in *commonpb.Payloads) (jobspec.JobSpec, *Carry, error) {
	return decodeInput[jobInput, Carry](dc, in)
}

// tuningInput is HyperparameterTuningJob's first argument: a JobSpec as
// typed in the UI or sent by the CLI. Its tuning block's carry is read
// only from runs continued before carryChange, which carried it there; it
// is not part of the TuningSpec and never written any more.
type tuningInput struct {
	jobspec.JobSpec
	Tuning *tuningBlock `json:"tuning,omitempty"`
	inputErrors
}

// UnmarshalJSON decodes the input strictly, as jobInput's does (the
// carry of an older run is not checked).
func (in *tuningInput) UnmarshalJSON(b []byte) error {
	type plain tuningInput
	in.inputErrors = decodeInputJSON(b, (*plain)(in), "tuning.carry")
	return nil
}

// tuningBlock is a TuningSpec with the carry runs continued before
// carryChange had in it.
type tuningBlock struct {
	jobspec.TuningSpec
	Carry *TuningCarry `json:"carry,omitempty"`
}

// split returns the spec and the carry inside it (nil: none).
func (in tuningInput) split() (jobspec.JobSpec, *TuningCarry) {
	spec := in.JobSpec
	spec.Tuning = nil
	if in.Tuning == nil {
		return spec, nil
	}
	t := in.Tuning.TuningSpec
	spec.Tuning = &t
	return spec, in.Tuning.Carry
}

// continueTuningAsNew continues a tuning job as a new run that resumes
// from carry, in the form continueAsNew writes.
func continueTuningAsNew(ctx workflow.Context, spec jobspec.JobSpec, carry *TuningCarry) error {
	if workflow.GetVersion(ctx, carryChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		in := tuningInput{JobSpec: spec}
		if spec.Tuning != nil {
			in.Tuning = &tuningBlock{TuningSpec: *spec.Tuning, Carry: carry}
		}
		return workflow.NewContinueAsNewError(ctx, HyperparameterTuningJobName, in)
	}
	return workflow.NewContinueAsNewError(ctx, HyperparameterTuningJobName, spec, carry)
}

// DecodeTuningInput decodes the input of a HyperparameterTuningJob run:
// the spec and, for a continued run, its trials so far (nil otherwise),
// in either form continueTuningAsNew writes.
func DecodeTuningInput(dc converter.DataConverter, in *commonpb.Payloads) (jobspec.JobSpec, *TuningCarry, error) {
	return decodeInput[tuningInput, TuningCarry](dc, in)
}

// ownerChange marks the owner in every activity input that touches a job
// directory (JobOwner): runs from then on name the job their activities
// act for, and the activities check it against the directory's claim.
// Activities of runs started before it get no owner and check the claim
// against the workflow that scheduled them (see activities).
const ownerChange = "job-owner"

// JobOwner is the job an activity acts for: the workflow's own job ID and
// first run ID, both from the Temporal server (workflow.GetInfo), never
// from the input or a carry. An activity refuses a job directory whose
// claim (job.json) names another owner; for a tuning job's trials the
// owner is the tuning job (their claims name it as Parent).
type JobOwner struct {
	JobID      string `json:"job_id"`
	FirstRunID string `json:"first_run_id"`
}

// jobOwner returns the owner this run's activities act for, or nil in a
// run started before ownerChange.
func jobOwner(ctx workflow.Context) *JobOwner {
	if workflow.GetVersion(ctx, ownerChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	info := workflow.GetInfo(ctx)
	return &JobOwner{JobID: info.WorkflowExecution.ID, FirstRunID: info.FirstRunID}
}

// parentOf returns the workflow ID of the workflow that started this one
// as its child, as the server recorded it ("" for a run a client started).
func parentOf(ctx workflow.Context) string {
	if p := workflow.GetInfo(ctx).ParentWorkflowExecution; p != nil {
		return p.ID
	}
	return ""
}
