package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// TestCeilingsRefuseClearly runs Train with specs past the operator's
// ceilings on steps and files (the max_steps 1e12 with 1-step
// checkpoints and summaries among them): each fails at once,
// non-retryable InvalidSpec naming the field and the flag, before the job
// directory is even opened; specs at the ceilings pass the check.
func TestCeilingsRefuseClearly(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	acts.Ceilings = Ceilings{MaxSteps: 1_000_000, MaxJobFiles: 300}
	for _, c := range []struct {
		name                 string
		steps, ckpt, summary int64
		want                 string
	}{
		{"issue: max_steps 1e12", 1e12, 1, 1, "train.max_steps 1000000000000 is over this worker's ceiling of 1000000 steps (worker --max-steps)"},
		{"checkpoint files", 1000, 9, 100, "train.save_checkpoints_steps 9 with train.max_steps 1000 commits 112 checkpoints, writing up to 336 files; this worker allows 300 files per job (worker --max-job-files): set train.save_checkpoints_steps to at least 10"},
		{"summary points", 1_000_000, 100_000, 1, "train.save_summary_steps 1 with train.max_steps 1000000 records 1000000 summary points; this worker allows 3000 per job (10 per file of worker --max-job-files): set train.save_summary_steps to at least 334"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := workflows.TrainInput{JobDir: filepath.Join(t.TempDir(), "never-opened"), Train: jobspec.TrainSpec{MaxSteps: c.steps, SaveCheckpointsSteps: c.ckpt, SaveSummarySteps: c.summary}}
			_, err := e.ExecuteActivity(acts.Train, in)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable() || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Train: %v, want non-retryable InvalidSpec %q", err, c.want)
			}
			if _, err := os.Stat(in.JobDir); !os.IsNotExist(err) {
				t.Fatalf("the refused job's directory exists: %v", err)
			}
			// A distributed job's workers are refused the same way.
			_, err = e.ExecuteActivity(acts.TrainWorker, workflows.RoleInput{TrainInput: in})
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable() || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("TrainWorker: %v, want non-retryable InvalidSpec %q", err, c.want)
			}
		})
	}
	for _, ok := range []jobspec.TrainSpec{
		{MaxSteps: 1_000_000, SaveCheckpointsSteps: 10_000, SaveSummarySteps: 334},
		{MaxSteps: 1000, SaveCheckpointsSteps: 10, SaveSummarySteps: 1},
		{MaxSteps: 1_000_000, SaveCheckpointsSecs: 60, SaveSummarySteps: 1000},
	} {
		if err := acts.checkCeilings(ok); err != nil {
			t.Errorf("%+v: %v, want it allowed", ok, err)
		}
	}
}

// TestShardCeilingStopsPreprocessing preprocesses the hash column
// of 2^20 buckets on 200 rows (1.7 GB of float64 shards) under a 100 MB
// ceiling and under the defaults a worker gets (--max-shard-bytes 1 GiB):
// the run fails, non-retryable InvalidSpec naming the column's
// hash_buckets and the flag, having written no shard and no Transform.
// The default lets Fashion-MNIST and census through.
func TestShardCeilingStopsPreprocessing(t *testing.T) {
	for _, c := range []struct {
		name    string
		ceiling int64
		want    string
	}{
		{"100 MB ceiling", 100e6, "over this worker's ceiling of 100000000 bytes (worker --max-shard-bytes)"},
		{"defaults", 0, "over this worker's ceiling of 1073741824 bytes (worker --max-shard-bytes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			acts := newActs(t)
			e := env(acts)
			acts.Ceilings.MaxShardBytes = c.ceiling
			s := hashSpec("shards_1", 1<<20, 200)
			v, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"})
			if err != nil {
				t.Fatal(err)
			}
			var prep workflows.PrepareResult
			v.Get(&prep)
			in := workflows.PreprocessInput{JobDir: prep.JobDir, BeamArgs: s.Data.BeamFlags(), Request: preprocess.Request{Schema: *s.Data.Schema, Train: prep.Train, Eval: prep.Eval,
				OutDir: prep.JobDir, TrainShards: 2, EvalShards: 1, Seed: 1, MaxBadFraction: 0.001,
				MaxShardBytes: 1 << 62}} // a client's value: the operator's wins
			t0 := time.Now()
			_, err = e.ExecuteActivity(acts.Preprocess, in)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable() {
				t.Fatalf("Preprocess: %v, want non-retryable InvalidSpec", err)
			}
			for _, want := range []string{c.want, "the train split: 200 rows × (1048644 features + the label)", `data.schema column "workclass" hash_buckets 1048576 (1048576 of the 1048644 features)`} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("Preprocess: %q does not say %q", err, want)
				}
			}
			var written int64
			filepath.Walk(filepath.Join(prep.JobDir, preprocess.DataDir), func(_ string, fi os.FileInfo, err error) error {
				if err == nil && !fi.IsDir() {
					written += fi.Size()
				}
				return nil
			})
			if written > 0 {
				t.Fatalf("%d bytes of shards written", written)
			}
			if _, err := os.Stat(filepath.Join(prep.JobDir, preprocess.TransformPath)); !os.IsNotExist(err) {
				t.Fatalf("the refused run's Transform: %v, want none written", err)
			}
			t.Logf("refused in %v: %v", time.Since(t0).Round(time.Millisecond), err)
		})
	}
	// What the default must let through: Fashion-MNIST's 70,000 images of
	// 784 pixels, census's 48,842 rows (its wide-and-deep Transform's
	// dimension is under 500).
	for _, ok := range []struct {
		name string
		rows int64
		dim  int
	}{{"Fashion-MNIST", 70_000, 784}, {"census", 48_842, 500}} {
		if need := preprocess.ShardBytes(ok.rows, ok.dim); need > DefaultMaxShardBytes {
			t.Errorf("%s: %d bytes of shards, over the default ceiling %d", ok.name, need, DefaultMaxShardBytes)
		}
	}
	if need := preprocess.ShardBytes(200, 1<<20); need <= DefaultMaxShardBytes {
		t.Errorf("the issue's 2^20 buckets × 200 rows: %d bytes, within the default ceiling %d", need, DefaultMaxShardBytes)
	}
}

// TestPrepareRefusesPastCeilings: PrepareJob checks the ceilings a spec
// alone decides (train.max_steps, the files its checkpoints and summaries
// make) before it makes or claims the job directory: a refused spec, with
// the default job directory or a job_dir of its own, fails at once,
// non-retryable InvalidSpec naming the field and the flag, and leaves no
// directory, claim or generated data behind. The same job within the
// ceilings is prepared.
func TestPrepareRefusesPastCeilings(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	acts.Ceilings = Ceilings{MaxSteps: 1_000_000, MaxJobFiles: 300}
	for _, c := range []struct {
		name                 string
		steps, ckpt, summary int64
		want                 string
	}{
		{"max_steps", 1e12, 1000, 100, "train.max_steps 1000000000000 is over this worker's ceiling of 1000000 steps (worker --max-steps)"},
		{"checkpoint files", 1000, 9, 100, "train.save_checkpoints_steps 9 with train.max_steps 1000 commits 112 checkpoints, writing up to 336 files; this worker allows 300 files per job (worker --max-job-files)"},
		{"summary points", 1_000_000, 100_000, 1, "train.save_summary_steps 1 with train.max_steps 1000000 records 1000000 summary points; this worker allows 3000 per job (10 per file of worker --max-job-files)"},
	} {
		for _, named := range []bool{false, true} {
			name := c.name + " default job_dir"
			if named {
				name = c.name + " job_dir"
			}
			t.Run(name, func(t *testing.T) {
				s := spec("ceil_prep")
				s.Train.MaxSteps, s.Train.SaveCheckpointsSteps, s.Train.SaveSummarySteps = c.steps, c.ckpt, c.summary
				dir := filepath.Join(acts.Home, "jobs", s.JobID)
				if named {
					dir = filepath.Join(t.TempDir(), "named", "ceil_prep")
					s.JobDir = dir
				}
				_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"})
				var ae *temporal.ApplicationError
				if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable() || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("PrepareJob: %v, want non-retryable InvalidSpec %q", err, c.want)
				}
				for _, p := range []string{dir, filepath.Dir(dir)} {
					if _, err := os.Stat(p); !os.IsNotExist(err) {
						t.Fatalf("%s after the refused PrepareJob: %v, want no directory", p, err)
					}
				}
			})
		}
	}
	s := spec("ceil_prep")
	s.Train.MaxSteps, s.Train.SaveCheckpointsSteps, s.Train.SaveSummarySteps = 1000, 10, 1
	v, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "run1"})
	if err != nil {
		t.Fatalf("PrepareJob at the ceilings: %v", err)
	}
	var prep workflows.PrepareResult
	v.Get(&prep)
	if _, err := os.Stat(filepath.Join(prep.JobDir, jobdir.ClaimFile)); err != nil {
		t.Fatalf("PrepareJob at the ceilings: no claim: %v", err)
	}
}

// TestHeavySlotsBoundAndHeartbeat holds the worker's one heavy slot and
// runs Train with a 2 s heartbeat timeout, no retry: it waits without
// training, heartbeating, past the timeout; after its third heartbeat
// the slot is freed and it trains. A wait whose context ends returns
// its error.
func TestHeavySlotsBoundAndHeartbeat(t *testing.T) {
	acts := newActs(t)
	s := spec("slots_1")
	prep, pre := prepare(t, env(acts), acts, s)
	slots, err := NewSlots(1)
	if err != nil {
		t.Fatal(err)
	}
	acts.Heavy = slots
	release, err := slots.Acquire(context.Background()) // another job's training
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	we := suite.NewTestWorkflowEnvironment()
	we.RegisterActivity(acts)
	run := func(ctx workflow.Context, in workflows.TrainInput) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 5 * time.Minute, HeartbeatTimeout: 2 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		return workflow.ExecuteActivity(ctx, "Train", in).Get(ctx, nil)
	}
	we.RegisterWorkflowWithOptions(run, workflow.RegisterOptions{Name: "slots"})
	beats, waited := 0, time.Duration(0)
	t0 := time.Now()
	trainedEarly := false
	we.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) {
		if beats++; beats == 3 {
			waited = time.Since(t0)
			trainedEarly, _ = exists(filepath.Join(prep.JobDir, "checkpoints", "checkpoint"))
			release()
		}
	})
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	we.ExecuteWorkflow("slots", in)
	if err := we.GetWorkflowError(); err != nil {
		t.Fatalf("Train behind a taken slot: %v (after %d heartbeats)", err, beats)
	}
	if beats < 3 || trainedEarly {
		t.Fatalf("%d heartbeats, trained before the slot was free: %v", beats, trainedEarly)
	}
	if waited < 2*time.Second {
		t.Fatalf("waited %v for the slot, not past the 2 s heartbeat timeout", waited)
	}
	if n := slots.InUse(); n != 0 {
		t.Fatalf("%d slots in use after Train returned, want 0", n)
	}
	t.Logf("waited %v for the slot, heartbeating, then trained", waited.Round(time.Millisecond))

	hold, _ := slots.Acquire(context.Background())
	defer hold()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := slots.Acquire(ctx); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "--max-heavy") {
		t.Fatalf("Acquire with a cancelled context: %v, want context.Canceled naming --max-heavy", err)
	}
}

func exists(p string) (bool, error) {
	_, err := os.Stat(p)
	if os.IsNotExist(err) {
		return false, nil
	}
	return err == nil, err
}
