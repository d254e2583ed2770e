package activities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/workflows"
)

func TestLocateKeepsJobsInsideRoots(t *testing.T) {
	base := t.TempDir()
	data, outside := filepath.Join(base, "data"), filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(data, "census"), 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret.csv"), []byte("x\n"), 0o644)
	os.Symlink(outside, filepath.Join(data, "escape"))
	os.Symlink(filepath.Join(outside, "secret.csv"), filepath.Join(data, "census", "adult.data"))
	// A root reached through a symbolic link is the directory it names.
	os.Symlink(data, filepath.Join(base, "data-link"))
	home := filepath.Join(base, "home")
	a := &Activities{Home: home, DataRoots: []string{filepath.Join(base, "data-link"), "s3://bucket/datasets?endpoint=http://minio:9000&region=us-east-1", "mem://m"}}

	ok := []struct{ loc, want string }{
		{filepath.Join(data, "census"), filepath.Join(data, "census")},
		{filepath.Join(base, "data-link", "new", "job"), filepath.Join(data, "new", "job")},
		{filepath.Join(home, "jobs", "j1"), filepath.Join(home, "jobs", "j1")},
		{"file://" + filepath.Join(data, "x.csv"), "file://" + filepath.Join(data, "x.csv")},
		{"s3://bucket/datasets/census/adult.data", "s3://bucket/datasets/census/adult.data?endpoint=http://minio:9000&region=us-east-1"},
		{"s3://bucket/datasets/a?endpoint=http://minio:9000&region=us-east-1", "s3://bucket/datasets/a?endpoint=http://minio:9000&region=us-east-1"},
		{"mem://m/jobs/x", "mem://m/jobs/x"},
	}
	for _, c := range ok {
		got, err := a.locate("job_dir", c.loc, true)
		if err != nil || got != c.want {
			t.Errorf("locate %s: %q, %v; want %q", c.loc, got, err, c.want)
		}
	}
	bad := []struct {
		loc    string
		strict bool
	}{
		{filepath.Join(data, "escape", "secret.csv"), false},
		{filepath.Join(data, "escape", "newjob"), true},
		{filepath.Join(data, "census", "adult.data"), false}, // a symlink to a file outside
		{filepath.Join(data, "..", "outside"), false},
		{"/etc/passwd", false},
		{data, true}, // a job dir must not be a root itself
		{filepath.Join(home, "models"), false},
		{"s3://bucket/datasets2/x", false},
		{"s3://other/datasets/x", false},
		{"gs://bucket/datasets/x", false},
		{"s3://bucket/datasets/x?endpoint=http://evil:9000", false},
		{"s3://bucket/datasets/../x", false},
		{"mem://n/x", false},
		{"file://" + outside, false},
	}
	for _, c := range bad {
		got, err := a.locate("data.train[0]", c.loc, c.strict)
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "data.train[0]") {
			t.Errorf("locate %s: %q, %v; want InvalidSpec naming the field", c.loc, got, err)
		}
	}
}

func TestCheckBeamArgsFollowsTheOperator(t *testing.T) {
	a := &Activities{}
	for _, args := range [][]string{
		nil,
		{"--parallelism=4"},
		{"--runner=universal", "--endpoint=h:1", "--environment_type=PROCESS", `--environment_config={"command":"/bin/sh"}`},
		{"--environment_type=PROCESS"},
		{"--environment_type=EXTERNAL", "--environment_config=h:1"},
		{"--runner=flink", "--endpoint=h:1", "--environment_config=evil/image"}, // DOCKER, the runner's default
		{"--endpoint=h:1"},
		{"--worker_binary=/tmp/x"},
		{"notaflag"},
	} {
		if err := a.checkBeamArgs(args); len(args) > 1 || len(args) == 1 && args[0] != "--parallelism=4" {
			if errType(err) != workflows.ErrTypeInvalidSpec {
				t.Errorf("%q with no runner or environment allowed: %v, want InvalidSpec", args, err)
			}
		} else if err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	a = &Activities{BeamRunners: []string{"universal", "flink"}, BeamEnvironments: []string{"DOCKER"}}
	for _, args := range [][]string{
		{"--runner=universal", "--endpoint=h:1", "--environment_type=LOOPBACK"},
		{"--runner=flink", "--endpoint=h:1", "--environment_config=apache/beam_go_sdk"},
		{"--runner=flink", "--endpoint=h:1", "--environment_type=docker"},
	} {
		if err := a.checkBeamArgs(args); err != nil {
			t.Errorf("%q allowed by the operator: %v", args, err)
		}
	}
	for _, args := range [][]string{
		{"--runner=spark", "--endpoint=h:1"},
		{"--runner=flink", "--endpoint=h:1", "--environment_type=PROCESS", `--environment_config={"command":"/bin/sh"}`},
	} {
		if err := a.checkBeamArgs(args); errType(err) != workflows.ErrTypeInvalidSpec {
			t.Errorf("%q: %v, want InvalidSpec", args, err)
		}
	}
}

// TestJobDirNotInsideAnotherJob: a spec cannot put its job directory among
// another job's outputs, locally or in object storage.
func TestJobDirNotInsideAnotherJob(t *testing.T) {
	acts := newActs(t)
	acts.DataRoots = append(acts.DataRoots, "mem://nested")
	e := env(acts)
	for _, dir := range []string{t.TempDir() + "/victim", "mem://nested/jobs/victim"} {
		victim := spec("victim_1")
		victim.JobDir = dir
		if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: victim, FirstRunID: "r1"}); err != nil {
			t.Fatal(err)
		}
		inner := spec("inner_1")
		inner.JobDir = dir + "/export/best"
		_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: inner, FirstRunID: "r2"})
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "another job") {
			t.Fatalf("job dir inside %s: %v, want InvalidSpec", dir, err)
		}
	}
}

// TestReadRootsAreReadOnly: a read root (the worker's --read-roots, e.g.
// /usr/share/datasets) lets jobs read data there but never put a job
// directory there.
func TestReadRootsAreReadOnly(t *testing.T) {
	base := t.TempDir()
	public := filepath.Join(base, "datasets")
	os.MkdirAll(filepath.Join(public, "fashion-mnist"), 0o755)
	a := &Activities{Home: filepath.Join(base, "home"), ReadRoots: []string{public}}
	f := filepath.Join(public, "fashion-mnist", "train-images-idx3-ubyte.gz")
	if got, err := a.locateData("data.dir", f); err != nil || got != f {
		t.Errorf("locateData %s: %q, %v; want it allowed", f, got, err)
	}
	for _, strict := range []bool{true, false} {
		_, err := a.locate("job_dir", filepath.Join(public, "job"), strict)
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "job_dir") {
			t.Errorf("job dir in a read root (strict %v): %v; want InvalidSpec naming job_dir", strict, err)
		}
	}
	if _, err := a.locateData("data.dir", filepath.Join(base, "elsewhere")); errType(err) != workflows.ErrTypeInvalidSpec {
		t.Errorf("outside every root: %v; want InvalidSpec", err)
	}
}

// TestStepsConfineTheirJobDir: a job directory, export or bundle handed
// to a step directly (as a carry typed into a start would, skipping
// PrepareJob) must lie inside the roots too: every step refuses one
// outside them, before touching it.
func TestStepsConfineTheirJobDir(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	outside := t.TempDir() // not a root: newActs roots its own directories
	acts.DataRoots = nil
	victim := filepath.Join(outside, "victim", "export", "final", "1")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func() error{
		"train": func() error {
			_, err := e.ExecuteActivity(acts.Train, workflows.TrainInput{JobDir: outside})
			return err
		},
		"evaluate": func() error {
			_, err := e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: outside, Step: 1})
			return err
		},
		"export": func() error {
			_, err := e.ExecuteActivity(acts.Export, workflows.ExportInput{JobDir: outside, Step: 1, Exporter: "final"})
			return err
		},
		"delete export": func() error {
			_, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: victim})
			return err
		},
		"publish": func() error {
			_, err := e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: "x", Bundle: victim, Model: "m"})
			return err
		},
	} {
		if err := run(); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "outside the directories") {
			t.Errorf("%s with a directory outside the roots: %v, want InvalidSpec", name, err)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the export outside the roots is gone: %v", err)
	}
}
