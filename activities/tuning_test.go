package activities

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

func TestTrialEvaluationsAndExport(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	dir := filepath.Join(acts.Home, "jobs", "hp_1_trial_2")
	os.MkdirAll(filepath.Join(dir, "eval"), 0o755)
	lines := `{"name":"eval","global_step":40,"metrics":{"accuracy":0.8,"auc":0.7}}
{"name":"other","global_step":20,"metrics":{"accuracy":0.1}}
{"name":"eval","global_step":20,"metrics":{"accuracy":0.75,"auc":0.6}}
{"name":"eval","global_step":20,"metrics":{"accuracy":0.75,"auc":0.6}}
not json
`
	os.WriteFile(filepath.Join(dir, jobdir.EvalMetricsFile), []byte(lines), 0o644)
	v, err := e.ExecuteActivity(acts.TrialEvaluations, workflows.TrialEvaluationsInput{Metric: "auc", Name: "eval",
		Trials: []workflows.TrialRef{{Number: 1, ID: "hp_1_trial_1"}, {Number: 2, ID: "hp_1_trial_2"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got workflows.TrialEvaluationsResult
	v.Get(&got)
	want := []workflows.TrialEval{{Step: 20, Value: 0.6}, {Step: 40, Value: 0.7}}
	if len(got.Evals) != 2 || len(got.Evals[0]) != 0 || !slices.Equal(got.Evals[1], want) {
		t.Errorf("evaluations %+v, want none for trial 1 and %v for trial 2", got.Evals, want)
	}
	if wantBad := []string{"", "1 unreadable line in eval/metrics.jsonl (line 5)"}; !slices.Equal(got.Unreadable, wantBad) {
		t.Errorf("unreadable lines %q, want %q: the line that is not a record is reported", got.Unreadable, wantBad)
	}
	os.WriteFile(filepath.Join(dir, jobdir.EvalMetricsFile), []byte(strings.TrimSuffix(lines, "not json\n")), 0o644)
	if v, err = e.ExecuteActivity(acts.TrialEvaluations, workflows.TrialEvaluationsInput{Metric: "auc", Name: "eval",
		Trials: []workflows.TrialRef{{Number: 2, ID: "hp_1_trial_2"}}}); err != nil {
		t.Fatal(err)
	}
	got = workflows.TrialEvaluationsResult{}
	if v.Get(&got); got.Unreadable != nil || len(got.Evals) != 1 || !slices.Equal(got.Evals[0], want) {
		t.Errorf("a log of records only: %+v, want %v and no unreadable lines (the result's JSON as before)", got, want)
	}
	if _, err := os.Stat(filepath.Join(acts.Home, "jobs", "hp_1_trial_1")); err == nil {
		t.Error("reading a trial not started yet created its job dir")
	}

	_, err = e.ExecuteActivity(acts.TrialEvaluations, workflows.TrialEvaluationsInput{Metric: "auc", Name: "eval",
		Trials: []workflows.TrialRef{{Number: 1, ID: "hp_1_trial_1", JobDir: "/etc/x"}}})
	if errType(err) != workflows.ErrTypeInvalidSpec {
		t.Errorf("a trial job_dir outside the worker's roots: %v, want an InvalidSpec refusal", err)
	}
	if _, err := e.ExecuteActivity(acts.TrialExport, workflows.TrialExportInput{JobDir: "/etc", Exporter: "best"}); errType(err) != workflows.ErrTypeInvalidSpec {
		t.Errorf("TrialExport outside the roots: %v, want an InvalidSpec refusal", err)
	}

	for _, step := range []string{"20", "40", "60"} {
		os.MkdirAll(filepath.Join(dir, "export", "best", step), 0o755)
	}
	for _, step := range []string{"20", "40"} { // 60 is incomplete: no metadata
		os.WriteFile(filepath.Join(dir, "export", "best", step, bundle.MetadataFile), []byte("{}"), 0o644)
	}
	v, err = e.ExecuteActivity(acts.TrialExport, workflows.TrialExportInput{JobDir: dir, Exporter: "best"})
	if err != nil {
		t.Fatal(err)
	}
	var exp string
	v.Get(&exp)
	if exp != filepath.Join(dir, "export", "best", "40") {
		t.Errorf("trial export %s, want the newest complete bundle export/best/40", exp)
	}
	if _, err := e.ExecuteActivity(acts.TrialExport, workflows.TrialExportInput{JobDir: dir, Exporter: "final"}); errType(err) != workflows.ErrTypeBadData {
		t.Errorf("missing export: %v, want a BadData error", err)
	}
}

func TestSuggestTrialsIsReproducible(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	lo, hi := 1e-4, 0.1
	spec := jobspec.TuningSpec{Goal: jobspec.TuningMaximize, Algorithm: jobspec.AlgorithmBayesian, Seed: 3, Params: []jobspec.TuningParam{
		{ParameterName: "model.learning_rate", Type: jobspec.ParamDouble, MinValue: &lo, MaxValue: &hi, ScaleType: jobspec.ScaleLog},
		{ParameterName: "model.optimizer", Type: jobspec.ParamCategorical, CategoricalValues: []string{"adam", "sgd", "ftrl"}},
		{ParameterName: "model.batch_size", Type: jobspec.ParamDiscrete, DiscreteValues: []float64{32, 64}},
	}}
	obj := func(v float64) *float64 { return &v }
	in := workflows.SuggestInput{Tuning: spec, N: 2, Pending: [][]float64{{0.01, 1, 32}}, Observed: []workflows.Trial{
		{Values: []float64{0.001, 0, 32}, Objective: obj(0.8)}, {Values: []float64{0.05, 2, 64}, Objective: obj(0.7)},
		{Values: []float64{0.0002, 1, 64}, Objective: obj(0.75)}, {Values: []float64{0.003, 0, 64}, Objective: obj(0.82)},
	}}
	var a, b workflows.SuggestResult
	v, err := e.ExecuteActivity(acts.SuggestTrials, in)
	if err != nil {
		t.Fatal(err)
	}
	v.Get(&a)
	v, _ = e.ExecuteActivity(acts.SuggestTrials, in)
	v.Get(&b)
	if len(a.Points) != 2 || !slices.EqualFunc(a.Points, b.Points, slices.Equal) {
		t.Fatalf("suggestions %v then %v, want the same two", a.Points, b.Points)
	}
	for _, p := range a.Points {
		if p[0] < lo || p[0] > hi || (p[1] != 0 && p[1] != 1 && p[1] != 2) || (p[2] != 32 && p[2] != 64) {
			t.Errorf("suggestion %v outside the space", p)
		}
	}
}

// TestImportPreprocessedRefuses: shared data is linked only into a trial
// of the tuning job named, and only data made by the same request.
func TestImportPreprocessedRefuses(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	prep, pre := prepare(t, e, acts, spec("hp_9_data_1"))
	in := workflows.ImportInput{From: prep.JobDir, TuningJobID: "hp_9", TransformHash: pre.TransformHash,
		Preprocess: workflows.PreprocessInput{JobDir: filepath.Join(acts.Home, "jobs", "hp_9_trial_1"), Request: preprocess.Request{OutDir: filepath.Join(acts.Home, "jobs", "hp_9_trial_1")}}}
	// The test environment's workflow is no trial of hp_9.
	if _, err := e.ExecuteActivity(acts.ImportPreprocessed, in); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "not a trial of tuning job") {
		t.Errorf("import into a job that is no trial: %v, want an InvalidSpec refusal", err)
	}
	in.From = "/etc"
	if _, err := e.ExecuteActivity(acts.ImportPreprocessed, in); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "shared_data.job_dir") {
		t.Errorf("import from outside the roots: %v, want an InvalidSpec refusal naming shared_data.job_dir", err)
	}

	// The request check: inputs inside each job dir compare by their
	// place in it; another schema or seed is another request.
	req := func(dir string, seed uint64) []byte {
		b, _ := json.Marshal(struct {
			R    preprocess.Request
			Args []string
		}{preprocess.Request{Schema: preprocess.CensusSchema(), Train: []string{dir + "/raw/train.csv"}, Eval: []string{"/data/adult.test"}, OutDir: dir, Seed: seed}, []string{"--job_name=" + filepath.Base(dir)}})
		return b
	}
	if !sameRequest(req("/jobs/a", 1), []string{"/jobs/a"}, req("/jobs/b", 1), []string{"/x", "/jobs/b"}) {
		t.Error("the same request in two job dirs differs")
	}
	if sameRequest(req("/jobs/a", 1), []string{"/jobs/a"}, req("/jobs/b", 2), []string{"/jobs/b"}) {
		t.Error("requests with other seeds are the same")
	}
	if sameRequest(req("/jobs/a", 1), []string{"/jobs/a"}, req("/jobs/b", 1), []string{"/jobs/c"}) {
		t.Error("inputs in another job's dir compare as the trial's own")
	}
}
