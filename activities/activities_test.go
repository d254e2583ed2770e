package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/preprocess/beampipe"
	"github.com/trainflow/trainflow/serving/batchjob/batchbeam"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestMain lets the test binary be the preprocess child process, the
// batch prediction child and the training and evaluation child
// (ChildCommand), the latter with testModelTypes as a worker built with
// them gives its children.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "preprocess" {
		os.Exit(beampipe.ChildMain(context.Background(), os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "batch-predict" {
		os.Exit(batchbeam.ChildMain(context.Background(), os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == ChildCommand {
		os.Exit(ChildMain(context.Background(), testModelTypes(), os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

func newActs(t testing.TB) *Activities {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	models, err := bundle.OpenRepository(context.Background(), filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { models.Close() })
	// The tests' data and job dirs are temporary directories.
	// The activity test environment runs every activity for one fixed
	// workflow ID: the tests' steps name none (asJob names one).
	return &Activities{Home: home, Models: models, Exe: exe, DataRoots: []string{os.TempDir()}, Keys: testKeyring(t), schedulerFunc: func(context.Context) string { return "" }}
}

// asJob makes acts' activities run as if job id had scheduled them.
func asJob(acts *Activities, id string) {
	acts.schedulerFunc = func(context.Context) string { return id }
}

func env(acts *Activities) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	e := s.NewTestActivityEnvironment()
	e.RegisterActivity(acts)
	return e
}

func errType(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Type()
	}
	return ""
}

func spec(id string) jobspec.JobSpec {
	return jobspec.JobSpec{JobID: id, Data: jobspec.DataSpec{GeneratedRows: 800}, Train: jobspec.TrainSpec{MaxSteps: 100, SaveCheckpointsSteps: 50}}.WithDefaults()
}

// prepare runs PrepareJob and Preprocess for a generated census job.
func prepare(t testing.TB, e *testsuite.TestActivityEnvironment, acts *Activities, s jobspec.JobSpec) (workflows.PrepareResult, jobspec.PreprocessResult) {
	t.Helper()
	v, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"})
	if err != nil {
		t.Fatal(err)
	}
	var prep workflows.PrepareResult
	v.Get(&prep)
	in := workflows.PreprocessInput{JobDir: prep.JobDir, BeamArgs: s.Data.BeamFlags(), Request: preprocess.Request{Schema: *s.Data.Schema, Train: prep.Train, Eval: prep.Eval,
		OutDir: prep.JobDir, TrainShards: 2, EvalShards: 1, Seed: 1, MaxBadFraction: 0.001}}
	v, err = e.ExecuteActivity(acts.Preprocess, in)
	if err != nil {
		t.Fatal(err)
	}
	var pre jobspec.PreprocessResult
	v.Get(&pre)
	return prep, pre
}

func TestPrepareClaimsJobDir(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("claim_1")
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"}); err != nil {
		t.Fatal(err)
	}
	// A retry or a reset of the same job (same first run) may use it again.
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"}); err != nil {
		t.Fatalf("same job again: %v", err)
	}
	_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run2"})
	if errType(err) != workflows.ErrTypeJobExists {
		t.Fatalf("another job with the same ID: %v, want JobExists", err)
	}
	missing := spec("claim_2")
	missing.Data.Dir = filepath.Join(t.TempDir(), "no-such-dir")
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: missing, FirstRunID: "r"}); errType(err) != workflows.ErrTypeInvalidSpec {
		t.Fatalf("missing data dir: %v, want InvalidSpec", err)
	}
}

func TestPreprocessRunsChildAndReusesItsOutput(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	prep, pre := prepare(t, e, acts, spec("pre_1"))
	if pre.TrainRows != 800 || pre.EvalRows != 200 || pre.Classes != 2 || pre.TransformHash == "" {
		t.Fatalf("preprocess result %+v, want 800/200 rows, 2 classes", pre)
	}
	if _, err := os.Stat(filepath.Join(prep.JobDir, "preprocess", "child.log")); err != nil {
		t.Fatalf("no child log: %v", err)
	}
	// A second run with the same request must not start a child: with a
	// child that cannot start, it still succeeds.
	acts.Exe = filepath.Join(t.TempDir(), "missing-binary")
	_, again := prepare(t, e, acts, spec("pre_1"))
	if again != pre {
		t.Fatalf("reused result %+v, want %+v", again, pre)
	}
}

func TestPreprocessBadDataIsNotRetryable(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	dir := t.TempDir()
	trainPath := filepath.Join(dir, "train.csv")
	os.WriteFile(trainPath, []byte("not, a, census, row\n"), 0o644)
	in := workflows.PreprocessInput{JobDir: filepath.Join(dir, "job"), Request: preprocess.Request{Schema: preprocess.CensusSchema(),
		Train: []string{trainPath}, Eval: []string{trainPath}, OutDir: filepath.Join(dir, "job"), TrainShards: 1, EvalShards: 1, MaxBadFraction: 0.001}}
	_, err := e.ExecuteActivity(acts.Preprocess, in)
	if errType(err) != workflows.ErrTypeBadData {
		t.Fatalf("all rows bad: %v, want BadData", err)
	}
	in.Request.Train = []string{filepath.Join(dir, "absent.csv")}
	if _, err := e.ExecuteActivity(acts.Preprocess, in); errType(err) != workflows.ErrTypeBadData {
		t.Fatalf("missing input: %v, want BadData before any work", err)
	}
}

// jobDirs are the kinds of job directory the activities are tested on:
// the default local directory, and object storage through a file://
// bucket outside the worker's home and through mem://.
func jobDirs(t *testing.T) []struct {
	name string
	dir  func(id string) string
} {
	bucket := t.TempDir()
	return []struct {
		name string
		dir  func(id string) string
	}{
		{"local", func(string) string { return "" }},
		{"file", func(id string) string { return "file://" + filepath.ToSlash(bucket) + "/jobs/" + id }},
		{"mem", func(id string) string { return fmt.Sprintf("mem://acts-%d/jobs/%s", memSeq.Add(1), id) }},
	}
}

var memSeq atomic.Int64

func TestTrainResumesAndExportIsIdempotent(t *testing.T) {
	for _, kind := range jobDirs(t) {
		t.Run(kind.name, func(t *testing.T) {
			acts := newActs(t)
			e := env(acts)
			s := spec("train_1")
			s.JobDir = kind.dir("train_1")
			if strings.HasPrefix(s.JobDir, "mem://") {
				acts.DataRoots = append(acts.DataRoots, path.Dir(strings.TrimPrefix(s.JobDir, "mem://")))
				acts.DataRoots[1] = "mem://" + acts.DataRoots[1]
			}
			prep, pre := prepare(t, e, acts, s)
			ctx := context.Background()
			st, err := storage.Open(ctx, prep.JobDir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
			in.Train.MaxSteps = 50
			if _, err := e.ExecuteActivity(acts.Train, in); err != nil {
				t.Fatal(err)
			}
			in.Train.MaxSteps = 100
			v, err := e.ExecuteActivity(acts.Train, in)
			if err != nil {
				t.Fatal(err)
			}
			var tr workflows.TrainResult
			v.Get(&tr)
			if tr.ResumedFrom != 50 || tr.Step != 100 {
				t.Fatalf("train %+v, want resumed from 50 to 100", tr)
			}
			if p, err := st.ReadPointer(ctx, "checkpoints/checkpoint"); err != nil || p != "checkpoints/ckpt-100" {
				t.Fatalf("checkpoint pointer names %q (%v), want checkpoints/ckpt-100", p, err)
			}
			v, err = e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 100})
			if err != nil {
				t.Fatal(err)
			}
			var ev workflows.EvaluateResult
			v.Get(&ev)
			if ev.Metrics.Examples != 200 || ev.Metrics.Accuracy <= 0.5 {
				t.Fatalf("eval %+v, want 200 examples better than chance", ev.Metrics)
			}
			// Retention deleting the evaluated checkpoint must not break its
			// export: the evaluator pinned it.
			if err := st.Delete(ctx, "checkpoints/ckpt-100"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: 75}); errType(err) != workflows.ErrTypeCheckpointGone {
				t.Fatalf("evaluating a checkpoint that is not there: %v, want CheckpointGone", err)
			}
			xin := workflows.ExportInput{JobID: "train_1", JobDir: prep.JobDir, Exporter: "final", Step: 100, Metrics: ev.Metrics}
			var first, second workflows.ExportResult
			for _, dst := range []*workflows.ExportResult{&first, &second} {
				v, err := e.ExecuteActivity(acts.Export, xin)
				if err != nil {
					t.Fatal(err)
				}
				v.Get(dst)
			}
			objs, err := st.List(ctx, "export/final/")
			if err != nil {
				t.Fatal(err)
			}
			if first != second || len(objs) != 4 || !slices.Contains(objs, "export/final/100/metadata.json") {
				t.Fatalf("two exports of step 100: %+v and %+v, objects %q; want one bundle of 4 files", first, second, objs)
			}
			var pubs [2]workflows.PublishResult
			for i := range pubs {
				v, err := e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: "train_1", Bundle: first.Dir, Model: "census"})
				if err != nil {
					t.Fatal(err)
				}
				v.Get(&pubs[i])
			}
			if pubs[0] != pubs[1] || pubs[0].Version != 1 || !pubs[0].Default {
				t.Fatalf("publishing twice: %+v, want version 1 (default) both times", pubs)
			}
			if kind.name != "local" {
				// The same bundle into a model repository in object storage.
				ms, err := storage.Open(ctx, fmt.Sprintf("mem://models-%d/models", memSeq.Add(1)))
				if err != nil {
					t.Fatal(err)
				}
				defer ms.Close()
				local := acts.Models
				acts.Models = bundle.NewStore(ms)
				for i := range pubs {
					v, err := e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: "train_1", Bundle: first.Dir, Model: "census"})
					if err != nil {
						t.Fatal(err)
					}
					v.Get(&pubs[i])
				}
				if pubs[0] != pubs[1] || pubs[0].Version != 1 || !pubs[0].Default {
					t.Fatalf("publishing twice to %s: %+v, want version 1 (default) both times", ms.URI(), pubs)
				}
				if vs, err := acts.Models.Versions(ctx, "census"); err != nil || !slices.Equal(vs, []int64{1}) {
					t.Fatalf("versions in %s: got %v %v, want [1] <nil>", ms.URI(), vs, err)
				}
				acts.Models = local
			}
			if _, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: first.Dir}); err != nil {
				t.Fatal(err)
			}
			if left, err := st.List(ctx, "export/final/"); err != nil || len(left) != 0 {
				t.Fatalf("after DeleteExport: %q, %v; want nothing", left, err)
			}
			evs, err := ReadEvents(ctx, prep.JobDir)
			if err != nil {
				t.Fatal(err)
			}
			var commits []float64
			for _, ev := range evs {
				if c, ok := ev.Record.(*jobdir.Checkpoint); ok {
					commits = append(commits, float64(c.GlobalStep))
				}
			}
			if !slices.Equal(commits, []float64{50, 100}) {
				t.Fatalf("checkpoint events at %v, want 50, 100", commits)
			}
			if kind.name != "local" {
				// Workers share only the store: the home holds the model
				// repository and the cache, and the cache no work directories.
				ents, _ := os.ReadDir(acts.Home)
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				if !slices.Equal(names, []string{"cache", "models"}) {
					t.Fatalf("home holds %q, want only cache and models", names)
				}
				left, _ := filepath.Glob(filepath.Join(acts.Home, "cache", "*", "*-*"))
				for _, l := range left {
					if !strings.Contains(filepath.Base(l), "data-") {
						t.Fatalf("work directory %s left in the cache", l)
					}
				}
			}
		})
	}
}

// trainAndExport prepares, trains (to s.Train.MaxSteps, 100 in spec's
// jobs), evaluates and exports (final) job s through the activities.
func trainAndExport(t *testing.T, e *testsuite.TestActivityEnvironment, acts *Activities, s jobspec.JobSpec) (train.Metrics, workflows.ExportResult) {
	t.Helper()
	prep, pre := prepare(t, e, acts, s)
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	if _, err := e.ExecuteActivity(acts.Train, in); err != nil {
		t.Fatal(err)
	}
	step := s.Train.MaxSteps
	v, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: prep.JobDir, Step: step})
	if err != nil {
		t.Fatal(err)
	}
	var ev workflows.EvaluateResult
	v.Get(&ev)
	v, err = e.ExecuteActivity(acts.Export, workflows.ExportInput{JobID: s.JobID, JobDir: prep.JobDir, Exporter: "final", Step: step, Metrics: ev.Metrics})
	if err != nil {
		t.Fatal(err)
	}
	var ex workflows.ExportResult
	v.Get(&ex)
	return ev.Metrics, ex
}

// TestWideAndDeepJobServes trains a wide & deep model through the
// activities and checks the published bundle loads in the server with the
// architecture it was trained with.
func TestWideAndDeepJobServes(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	s := spec("wd_1")
	s.Model = jobspec.ModelSpec{Type: "dnn_linear_combined_classifier", HiddenUnits: []int{16, 8}, Dropout: 0.1, Optimizer: "adagrad", LearningRate: 0.05, BatchSize: 32}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	ev, ex := trainAndExport(t, e, acts, s)
	if ev.Accuracy <= 0.5 {
		t.Fatalf("wide & deep accuracy %v, want better than chance", ev.Accuracy)
	}
	b, err := bundle.ReadDir(ex.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Transform(); err != nil {
		t.Fatal(err)
	}
	if m := b.Meta.Model; m.Model != "dnn_linear_combined_classifier" || m.Spec == nil || !slices.Equal(m.Spec.HiddenUnits, []int{16, 8}) {
		t.Fatalf("bundle model %+v, want wide & deep [16 8]", m)
	}
}

// TestInputsAndJobDirsInObjectStorage runs a job whose raw data and job
// directory (the worker's default, Activities.Jobs) are in object storage.
func TestInputsAndJobDirsInObjectStorage(t *testing.T) {
	ctx := context.Background()
	root := fmt.Sprintf("mem://acts-%d", memSeq.Add(1))
	data, err := storage.Open(ctx, root+"/datasets")
	if err != nil {
		t.Fatal(err)
	}
	for name, rows := range map[string]int{"train.csv": 600, "eval.csv": 150} {
		err := data.WriteFunc(ctx, name, func(w io.Writer) error { return datagen.Census(w, rows, 5, name == "eval.csv") })
		if err != nil {
			t.Fatal(err)
		}
	}
	acts := newActs(t)
	acts.Jobs = root + "/jobs"
	acts.DataRoots = append(acts.DataRoots, root+"/datasets")
	e := env(acts)
	s := spec("remote_1")
	s.Data.Train, s.Data.Eval = []string{root + "/datasets/train.csv"}, []string{root + "/datasets/eval.csv"}
	prep, pre := prepare(t, e, acts, s)
	if prep.JobDir != root+"/jobs/remote_1" || pre.TrainRows != 600 || pre.EvalRows != 150 {
		t.Fatalf("job dir %s, %d/%d rows; want %s/jobs/remote_1, 600/150", prep.JobDir, pre.TrainRows, pre.EvalRows, root)
	}
	jobs, err := storage.Open(ctx, prep.JobDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"job.json", "transform/transform.json", "data/manifest.json", "data/train-00000-of-00002", "preprocess/request.json", "preprocess/child.log"} {
		if ok, err := jobs.Exists(ctx, key); !ok || err != nil {
			t.Fatalf("%s not in the job dir: %v", key, err)
		}
	}
	s.Data.Train = []string{root + "/datasets/absent.csv"}
	s.JobID = "remote_2"
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "r"}); errType(err) != workflows.ErrTypeInvalidSpec {
		t.Fatalf("missing input object: %v, want InvalidSpec", err)
	}
	in := workflows.PreprocessInput{JobDir: root + "/jobs/remote_3", Request: preprocess.Request{Schema: preprocess.CensusSchema(),
		Train: s.Data.Train, Eval: s.Data.Eval, OutDir: root + "/jobs/remote_3", TrainShards: 1, EvalShards: 1, MaxBadFraction: 0.001}}
	if _, err := e.ExecuteActivity(acts.Preprocess, in); errType(err) != workflows.ErrTypeBadData {
		t.Fatalf("missing input object: %v, want BadData before any work", err)
	}
}
