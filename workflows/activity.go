package workflows

import (
	"reflect"

	"github.com/trainflow/trainflow/jobspec"
	"go.temporal.io/sdk/workflow"
)

// Activity is a typed reference to a registered activity: its wire name
// (a method of activities.Activities, registered under its method name)
// with the types of its input and result. The workflows call activities
// only through the references in acts, so the compiler checks every call
// site's input and result; the worker package's wiring test checks each
// reference against the registered method. Out is NoResult for an
// activity that returns only an error.
type Activity[In, Out any] struct {
	// Name is the registered activity type name: wire API.
	Name string
}

// NoResult is the Out of an activity that returns only an error.
type NoResult struct{}

// Future is the pending result of an Activity; Result decodes the typed
// value. Untyped gives the workflow.Future a Selector takes.
type Future[Out any] struct {
	f workflow.Future
}

// Execute schedules the activity with the activity options of ctx.
func (a Activity[In, Out]) Execute(ctx workflow.Context, in In) Future[Out] {
	return Future[Out]{workflow.ExecuteActivity(ctx, a.Name, in)}
}

// Untyped returns the workflow.Future, for Selector.AddFuture (which
// takes only the SDK's own futures).
func (f Future[Out]) Untyped() workflow.Future { return f.f }

// IsReady reports whether the result is in.
func (f Future[Out]) IsReady() bool { return f.f.IsReady() }

// Run executes the activity and waits for its result.
func (a Activity[In, Out]) Run(ctx workflow.Context, in In) (Out, error) {
	return a.Execute(ctx, in).Result(ctx)
}

// Result waits for the activity and returns its result; for NoResult
// only the error.
func (f Future[Out]) Result(ctx workflow.Context) (Out, error) {
	var out Out
	err := f.Into(ctx, &out)
	return out, err
}

// Into waits for the activity and decodes its result into *out, keeping
// the fields the result leaves out; for NoResult or a nil out it only
// waits.
func (f Future[Out]) Into(ctx workflow.Context, out *Out) error {
	if _, none := any(out).(*NoResult); none || out == nil {
		return f.f.Get(ctx, nil)
	}
	return f.f.Get(ctx, out)
}

// ActivityName is the registered name.
func (a Activity[In, Out]) ActivityName() string { return a.Name }

// Signature returns the input and result types; out is nil for an
// activity that returns only an error.
func (a Activity[In, Out]) Signature() (in, out reflect.Type) {
	in = reflect.TypeFor[In]()
	if out = reflect.TypeFor[Out](); out == reflect.TypeFor[NoResult]() {
		out = nil
	}
	return in, out
}

// ActivityRef is what every Activity has in common, for checks that walk
// all of them (ActivityRefs).
type ActivityRef interface {
	ActivityName() string
	Signature() (in, out reflect.Type)
}

// Registered activity names: wire API, the names of the methods of
// activities.Activities, one per field of acts (in its order).
const (
	PrepareJobActivity = "PrepareJob"
	PreprocessActivity = "Preprocess"
	// ImportPreprocessedActivity links data a tuning job preprocessed once
	// into one of its trials' job dirs (JobSpec.SharedData).
	ImportPreprocessedActivity = "ImportPreprocessed"
	TrainActivity              = "Train"
	EvaluateActivity           = "Evaluate"
	ExportActivity             = "Export"
	// DeleteExportActivity removes an export bundle that fell out of an
	// exporter's exports_to_keep.
	DeleteExportActivity = "DeleteExport"
	PublishActivity      = "Publish"
	// BlessActivity evaluates an export against the model's default
	// version and applies a bless section's thresholds.
	BlessActivity            = "Bless"
	ParameterServerActivity  = "ParameterServer"
	TrainWorkerActivity      = "TrainWorker"
	SuggestTrialsActivity    = "SuggestTrials"
	TrialEvaluationsActivity = "TrialEvaluations"
	TrialExportActivity      = "TrialExport"
	TuningHistoryActivity    = "TuningHistory"
	BatchPredictActivity     = "BatchPredict"
	// ReportKeyActivity makes the key a run's trainers and parameter
	// servers sign their reports to it with (checkpoint_committed
	// signals, register_parameter_server updates).
	ReportKeyActivity = "ReportKey"
	// BatchReportKeyActivity claims a batch prediction's output directory
	// and makes the key its BatchPredict signs its progress reports with
	// (batch_progress signals).
	BatchReportKeyActivity = "BatchReportKey"
	// AppReplicaActivity runs one replica of an application job.
	AppReplicaActivity = "AppReplica"
)

// acts are the activities the workflows call, one field each. Adding an
// activity means adding a field here and the method on
// activities.Activities; the wiring test in package worker checks that
// the two agree.
var acts = struct {
	PrepareJob         Activity[PrepareInput, PrepareResult]
	Preprocess         Activity[PreprocessInput, jobspec.PreprocessResult]
	ImportPreprocessed Activity[ImportInput, jobspec.PreprocessResult]
	Train              Activity[TrainInput, TrainResult]
	Evaluate           Activity[EvaluateInput, EvaluateResult]
	Export             Activity[ExportInput, ExportResult]
	DeleteExport       Activity[DeleteExportInput, NoResult]
	Publish            Activity[PublishInput, PublishResult]
	ParameterServer    Activity[RoleInput, WorkerResult]
	TrainWorker        Activity[RoleInput, WorkerResult]
	SuggestTrials      Activity[SuggestInput, SuggestResult]
	TrialEvaluations   Activity[TrialEvaluationsInput, TrialEvaluationsResult]
	TrialExport        Activity[TrialExportInput, string]
	TuningHistory      Activity[TuningHistoryInput, TuningReport]
	BatchPredict       Activity[BatchPredictInput, BatchPredictionResult]
	ReportKey          Activity[ReportKeyInput, ReportKeyResult]
	BatchReportKey     Activity[BatchPredictInput, ReportKeyResult]
	Bless              Activity[BlessInput, BlessResult]
	AppReplica         Activity[ReplicaInput, ReplicaResult]
	ModelOp            Activity[ModelOpInput, ModelOpResult]
}{
	PrepareJob:         Activity[PrepareInput, PrepareResult]{PrepareJobActivity},
	Preprocess:         Activity[PreprocessInput, jobspec.PreprocessResult]{PreprocessActivity},
	ImportPreprocessed: Activity[ImportInput, jobspec.PreprocessResult]{ImportPreprocessedActivity},
	Train:              Activity[TrainInput, TrainResult]{TrainActivity},
	Evaluate:           Activity[EvaluateInput, EvaluateResult]{EvaluateActivity},
	Export:             Activity[ExportInput, ExportResult]{ExportActivity},
	DeleteExport:       Activity[DeleteExportInput, NoResult]{DeleteExportActivity},
	Publish:            Activity[PublishInput, PublishResult]{PublishActivity},
	ParameterServer:    Activity[RoleInput, WorkerResult]{ParameterServerActivity},
	TrainWorker:        Activity[RoleInput, WorkerResult]{TrainWorkerActivity},
	SuggestTrials:      Activity[SuggestInput, SuggestResult]{SuggestTrialsActivity},
	TrialEvaluations:   Activity[TrialEvaluationsInput, TrialEvaluationsResult]{TrialEvaluationsActivity},
	TrialExport:        Activity[TrialExportInput, string]{TrialExportActivity},
	TuningHistory:      Activity[TuningHistoryInput, TuningReport]{TuningHistoryActivity},
	BatchPredict:       Activity[BatchPredictInput, BatchPredictionResult]{BatchPredictActivity},
	ReportKey:          Activity[ReportKeyInput, ReportKeyResult]{ReportKeyActivity},
	BatchReportKey:     Activity[BatchPredictInput, ReportKeyResult]{BatchReportKeyActivity},
	Bless:              Activity[BlessInput, BlessResult]{BlessActivity},
	AppReplica:         Activity[ReplicaInput, ReplicaResult]{AppReplicaActivity},
	ModelOp:            Activity[ModelOpInput, ModelOpResult]{ModelOpActivity},
}

// ActivityRefs returns every activity the workflows call, in the order of
// acts. A worker must register a method of the same name and signature
// for each.
func ActivityRefs() []ActivityRef {
	var refs []ActivityRef
	for _, set := range []any{acts, rolloutActs} {
		v := reflect.ValueOf(set)
		for i := range v.NumField() {
			refs = append(refs, v.Field(i).Interface().(ActivityRef))
		}
	}
	return refs
}
