package mlapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/workflows"
)

// Job is Cloud ML Engine's Job resource as trainflow answers it. Int64
// fields are JSON strings, as Google's JSON mapping writes them.
type Job struct {
	JobID            string            `json:"jobId"`
	TrainingInput    json.RawMessage   `json:"trainingInput,omitempty"`
	PredictionInput  json.RawMessage   `json:"predictionInput,omitempty"`
	CreateTime       string            `json:"createTime,omitempty"`
	StartTime        string            `json:"startTime,omitempty"`
	EndTime          string            `json:"endTime,omitempty"`
	State            string            `json:"state"`
	ErrorMessage     string            `json:"errorMessage,omitempty"`
	TrainingOutput   *TrainingOutput   `json:"trainingOutput,omitempty"`
	PredictionOutput *PredictionOutput `json:"predictionOutput,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	Etag             string            `json:"etag"`
}

// TrainingOutput is a training or tuning job's output.
type TrainingOutput struct {
	CompletedTrialCount       string                 `json:"completedTrialCount,omitempty"`
	Trials                    []HyperparameterOutput `json:"trials,omitempty"`
	ConsumedMLUnits           float64                `json:"consumedMLUnits,omitempty"`
	IsHyperparameterTuningJob bool                   `json:"isHyperparameterTuningJob,omitempty"`
	HyperparameterMetricTag   string                 `json:"hyperparameterMetricTag,omitempty"`
	// BuiltInAlgorithmOutput is a built-in model's: where its export is
	// (the deploymentUri of versions.create).
	BuiltInAlgorithmOutput *BuiltInAlgorithmOutput `json:"builtInAlgorithmOutput,omitempty"`
}

// BuiltInAlgorithmOutput is Cloud ML Engine's output of a built-in
// algorithm's job: trainflow's built-in models are such.
type BuiltInAlgorithmOutput struct {
	Framework string `json:"framework"`
	ModelPath string `json:"modelPath"`
}

// HyperparameterOutput is one trial of a tuning job.
type HyperparameterOutput struct {
	TrialID             string            `json:"trialId"`
	Hyperparameters     map[string]string `json:"hyperparameters,omitempty"`
	FinalMetric         *Metric           `json:"finalMetric,omitempty"`
	IsTrialStoppedEarly bool              `json:"isTrialStoppedEarly,omitempty"`
	State               string            `json:"state,omitempty"`
}

// Metric is a trial's objective at a step.
type Metric struct {
	TrainingStep   string  `json:"trainingStep"`
	ObjectiveValue float64 `json:"objectiveValue"`
}

// PredictionOutput is a batch prediction job's output.
type PredictionOutput struct {
	OutputPath      string  `json:"outputPath,omitempty"`
	PredictionCount string  `json:"predictionCount,omitempty"`
	ErrorCount      string  `json:"errorCount,omitempty"`
	NodeHours       float64 `json:"nodeHours,omitempty"`
}

// Cloud ML Engine's job states.
const (
	StateQueued     = "QUEUED"
	StatePreparing  = "PREPARING"
	StateRunning    = "RUNNING"
	StateSucceeded  = "SUCCEEDED"
	StateFailed     = "FAILED"
	StateCancelling = "CANCELLING"
	StateCancelled  = "CANCELLED"
)

// states are the states a filter may name.
var states = []string{StateQueued, StatePreparing, StateRunning, StateSucceeded, StateFailed, StateCancelling, StateCancelled}

// stateOf is the Cloud ML Engine state of a run in trainflow's status
// (jobs.StatusName) and phase: a running run is QUEUED until its
// workflow records a phase, PREPARING while it validates and
// preprocesses, CANCELLING once a cancel was asked; a terminated or
// timed-out run is FAILED.
func stateOf(status, phase string, cancelRequested bool) string {
	switch status {
	case "RUNNING":
		switch {
		case cancelRequested:
			return StateCancelling
		case phase == "":
			return StateQueued
		case phase == workflows.PhaseValidating || phase == workflows.PhasePreprocessing:
			return StatePreparing
		}
		return StateRunning
	case "SUCCEEDED":
		return StateSucceeded
	case "CANCELLED":
		return StateCancelled
	}
	return StateFailed
}

// rfc3339 is t as Google's JSON writes a Timestamp.
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// etag is a digest of what the job's answer depends on.
func etag(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)[:12])
}

// jobOf is the Job of a description (jobs.Describe).
func jobOf(d *jobs.Description) *Job {
	j := &Job{JobID: d.JobID, State: stateOf(d.Status, d.Phase, d.CancelRequested), CreateTime: rfc3339(d.Start), StartTime: rfc3339(d.Start),
		Labels: d.Meta.Labels, TrainingInput: d.Meta.TrainingInput, PredictionInput: d.Meta.PredictionInput, ErrorMessage: d.Error}
	end := ""
	if d.End != nil {
		end = rfc3339(*d.End)
		j.EndTime = end
	}
	switch d.Workflow {
	case workflows.BatchPredictionJobName:
		j.PredictionOutput = &PredictionOutput{}
		if r := d.BatchResult; r != nil {
			j.PredictionOutput.OutputPath, j.PredictionOutput.PredictionCount, j.PredictionOutput.ErrorCount = r.OutputPath, itoa(r.Predictions), itoa(r.Errors)
		} else if p := d.Batch; p != nil {
			j.PredictionOutput.PredictionCount, j.PredictionOutput.ErrorCount = itoa(p.Predictions), itoa(p.Errors)
		}
	default:
		j.TrainingOutput = &TrainingOutput{}
		var t *workflows.TuningReport
		if d.Result != nil {
			t = d.Result.Tuning
		} else if d.Progress != nil {
			t = d.Progress.Tuning
		}
		if d.Workflow == workflows.HyperparameterTuningJobName || t != nil {
			j.TrainingOutput.IsHyperparameterTuningJob = true
		}
		if t != nil {
			trainingOutput(j.TrainingOutput, t)
		}
		if r := d.Result; r != nil && r.Export != "" {
			j.TrainingOutput.BuiltInAlgorithmOutput = &BuiltInAlgorithmOutput{Framework: "TRAINFLOW", ModelPath: r.Export}
		}
	}
	j.Etag = jobEtag(d.RunID, j.Labels)
	return j
}

// jobEtag is a job's etag: the version of what jobs.patch changes (its
// labels) in its run. A job's state changes on its own and must not
// abort a client's read-modify-write of its labels.
func jobEtag(runID string, labels map[string]string) string {
	b, _ := json.Marshal(labels) // sorted keys
	return etag(runID, string(b))
}

// trainingOutput fills o with a tuning job's trials.
func trainingOutput(o *TrainingOutput, t *workflows.TuningReport) {
	o.HyperparameterMetricTag = t.Metric
	done := 0
	for _, tr := range t.Trials {
		h := HyperparameterOutput{TrialID: strconv.Itoa(tr.Number), Hyperparameters: tr.Params, IsTrialStoppedEarly: tr.StoppedEarly, State: tr.State}
		if tr.Objective != nil {
			h.FinalMetric = &Metric{TrainingStep: itoa(tr.Step), ObjectiveValue: *tr.Objective}
		}
		switch tr.State {
		case workflows.TrialStopped: // ended early by the stopping rule: a completed trial
			h.State, h.IsTrialStoppedEarly = StateSucceeded, true
			done++
		case workflows.TrialSucceeded, workflows.TrialFailed:
			done++
		}
		o.Trials = append(o.Trials, h)
	}
	o.CompletedTrialCount = itoa(int64(done))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
