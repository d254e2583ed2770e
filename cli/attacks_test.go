package cli

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/internal/testenv/peakrss"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// largestChildRSS is the peak resident set of the largest child process
// this process has waited for (preprocessing and training children).
func largestChildRSS(t *testing.T) int64 {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Maxrss << 10
}

// censusHashSchema is the census preset's schema with its workclass
// column hashed into buckets one-hot features, as JSON a client types
// into data.schema.
func censusHashSchema(t *testing.T, buckets int) string {
	t.Helper()
	sc := preprocess.CensusSchema()
	for i, c := range sc.Columns {
		if c.Name == "workclass" {
			sc.Columns[i].Treatment, sc.Columns[i].HashBuckets = preprocess.Hash, buckets
		}
	}
	b, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stackServes asserts that the dev stack still answers: Temporal's health
// check, the console over HTTP, and a small ordinary job that succeeds.
func stackServes(t *testing.T, st *stack, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := st.Client.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Fatalf("temporal health check: %v", err)
	}
	if code, _ := get(t, "http://"+st.HTTPAddr, "/console/jobs"); code != http.StatusOK {
		t.Fatalf("GET /console/jobs: %d", code)
	}
	res, err := waitJob(t, startUIStyle(t, st.Client, id, jobInput(id, `{"generated_rows":1000}`, `{}`, 100, 50)))
	if err != nil || res.GlobalStep != 100 {
		t.Fatalf("an ordinary job after the attack: step %d, %v", res.GlobalStep, err)
	}
}

// TestOOMSpecsThroughRawClient starts the out-of-memory specs as
// a raw Temporal client would (the UI's JSON, ExecuteWorkflow) on the dev
// stack with every memory, child and ceiling flag at its default (the
// tests' --data-roots and --model-owners are the only flags): a hash
// column of 2^20 buckets with model.batch_size 65536, on the preset's
// 20,000 generated rows and on 8 rows, and model.hidden_units
// [8192, 8192]. Each is refused, not retried, naming the spec field at
// fault, or, where the machine is large enough for its memory estimate,
// trains in child processes and succeeds; this process (Temporal, the
// worker, the prediction server and the console) keeps its peak resident
// set within 512 MiB of where it started, and serves an ordinary job
// afterwards.
//
// What stops each with the defaults:
//   - 2^20 buckets on 20,000 rows: the preprocessing child, when the
//     Transform is fitted, before any shard is written (--max-shard-bytes,
//     4 GB: the shards would be 168 GB);
//   - 2^20 buckets on 8 rows (67 MB of shards): Train's memory estimate,
//     before any training child starts (--max-train-memory, half the
//     machine: the batch alone is 550 GB);
//   - hidden_units [8192, 8192] (68M parameters): Train's memory estimate
//     (7.6 GB) where half the machine is less; on a machine with more than
//     15 GiB the estimate accepts it: training, evaluation and export run
//     in children (this process reads only checkpoint heads), and the job
//     succeeds. Publishing it then loads the model into this process
//     (Publish verifies the bundle in memory and the prediction server
//     serves it), about five times the model's bytes at the peak: the
//     published case is bounded by that, the case with "publish": "none"
//     by 512 MiB.
func TestOOMSpecsThroughRawClient(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	hash := censusHashSchema(t, 1<<20)
	limit := activities.DefaultMaxTrainBytes()
	t.Logf("default --max-train-memory on this machine: %s", activities.FormatBytes(limit))
	const hidden = `"data":{"generated_rows":800},"model":{"type":"dnn_classifier","hidden_units":[8192,8192]},"train":{"max_steps":2,"save_checkpoints_steps":2}`
	for _, c := range []struct {
		name, id, spec string
		want           []string // in the error, when the spec is refused
		// estimated: the refusal is the memory estimate's, which a
		// machine large enough passes (the job must then succeed).
		estimated bool
		// served: an accepted job publishes its model into this process.
		served bool
	}{
		{"batch 65536 × hash 2^20", "oom_hash",
			`{"job_id":"oom_hash","preset":"census","data":{"schema":` + hash + `},"model":{"batch_size":65536}}`,
			[]string{`data.schema column "workclass"`, "--max-shard-bytes"}, false, false},
		{"batch 65536 × hash 2^20 on 8 rows", "oom_hash_rows",
			`{"job_id":"oom_hash_rows","preset":"census","data":{"generated_rows":8,"schema":` + hash + `},"model":{"batch_size":65536}}`,
			[]string{"model.batch_size 65536", "--max-train-memory"}, true, false},
		{"hidden_units [8192 8192] unpublished", "oom_hidden_unpublished",
			`{"job_id":"oom_hidden_unpublished","preset":"census","publish":"none",` + hidden + `}`,
			[]string{"model.hidden_units [8192 8192]", "--max-train-memory"}, true, false},
		{"hidden_units [8192 8192]", "oom_hidden",
			`{"job_id":"oom_hidden","preset":"census",` + hidden + `}`,
			[]string{"model.hidden_units [8192 8192]", "--max-train-memory"}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mark := peakrss.Start(t)
			t0 := time.Now()
			res, err := waitJob(t, startUIStyle(t, st.Client, c.id, c.spec))
			peak, grew := mark.Growth(t)
			t.Logf("%s in %v: this process's peak RSS %d MiB, grew %d MiB; largest child's peak RSS so far %d MiB; %v",
				c.id, time.Since(t0).Round(time.Millisecond), peak>>20, grew>>20, largestChildRSS(t)>>20, err)
			bound := int64(512 << 20)
			accepted := false
			if c.estimated {
				need, model := memoryNeed(t, c.spec, filepath.Join(home, "jobs", c.id))
				t.Logf("memory estimate of %s: %s, its model %s (limit %s)", c.id, activities.FormatBytes(need), activities.FormatBytes(model), activities.FormatBytes(limit))
				if accepted = need <= limit; accepted && c.served {
					bound += 6 * model
				}
			}
			var ae *temporal.ApplicationError
			switch {
			case accepted && err != nil:
				t.Fatalf("accepted by the estimate, then failed: %v", err)
			case accepted:
				t.Logf("accepted by the estimate: trained in a child to step %d", res.GlobalStep)
			case !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable():
				t.Fatalf("%v, want a non-retryable %s error", err, workflows.ErrTypeInvalidSpec)
			default:
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not name %q", err, w)
					}
				}
			}
			if grew > bound {
				t.Errorf("this process's peak RSS grew by %d MiB, want at most %d MiB", grew>>20, bound>>20)
			}
		})
	}
	stackServes(t, st, "after_oom")
}

// memoryNeed is the memory estimate of the TrainingJob spec in the JSON
// spec on the data preprocessed into jobDir, as Train computes it
// (train.MemoryNeed), and the bytes of its model's variables as loaded
// for evaluation (train.EvalMemoryNeed's Model part).
func memoryNeed(t *testing.T, spec, jobDir string) (need, model int64) {
	t.Helper()
	s, err := jobspec.DecodeSpec([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithDefaults()
	m, err := preprocess.ReadManifest(jobDir)
	if err != nil {
		t.Fatalf("the job's manifest: %v", err)
	}
	meta := train.CheckpointMeta{Model: s.Model.Type, Dim: m.Dim, Classes: m.Classes}
	if !s.Model.Linear() {
		meta.Spec = &train.ModelSpec{HiddenUnits: s.Model.HiddenUnits, Dropout: s.Model.Dropout, Float32: s.Model.TrainFloat32()}
	}
	n, err := train.MemoryNeed(meta, s.Model.Optimizer, s.Model.BatchSize, int(m.TrainRows))
	if err != nil {
		t.Fatal(err)
	}
	e, err := train.EvalMemoryNeed(meta, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n.Total(), e.Model
}

// TestForgedReportsAgainstLiveDistributedJob forges, through a raw
// Temporal client, what a distributed job's roles send its workflow,
// while the job (CUSTOM, one worker and one parameter server, census)
// trains: register_parameter_server updates that name no run and an
// attacker's address, checkpoint_committed signals of step 9e18, and of
// a plausible step with no signature and with a random one. The updates
// are rejected; the job completes, every checkpoint its chief committed
// is evaluated and nothing else is, and the cluster never lists the
// attacker's address.
func TestForgedReportsAgainstLiveDistributedJob(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	ctx := context.Background()
	const id, maxSteps, save = "forged_1", 20000, 1000
	// keep_checkpoint_max holds every commit, so the evaluator's queue
	// drops none however slowly it evaluates: each real commit must be
	// evaluated.
	spec := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"generated_rows":20000},
		"train":{"max_steps":%d,"save_checkpoints_steps":%d,"keep_checkpoint_max":%d},"eval_spec":{"throttle_secs":0},
		"cluster":{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"update":"async","heartbeat_timeout_secs":4}}`,
		id, maxSteps, save, maxSteps/save)
	run := startUIStyle(t, st.Client, id, spec)
	c := &cluster{t: t, st: st, home: home}
	first, _ := c.committed(id, 1) // the chief has committed: the parameter server registered, the evaluator listens
	if first >= maxSteps {
		t.Fatalf("the job committed its last step %d before the forgeries", first)
	}
	const attacker = "203.0.113.66:4444"
	d, err := st.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	runID := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	mark := peakrss.Start(t)

	t.Run("register_parameter_server", func(t *testing.T) {
		sig := make([]byte, 64)
		rand.Read(sig)
		for _, r := range []workflows.PSRegistration{
			{Task: 0, Addr: attacker, Host: "evil", PID: 1},                               // no run, no signature
			{Task: 0, Addr: attacker, Host: "evil", PID: 1, RunID: runID},                 // this run, no signature
			{Task: 0, Addr: attacker, Host: "evil", PID: 1, RunID: runID, Signature: sig}, // a random signature
			{Task: 7, Addr: attacker, RunID: runID, Signature: sig},                       // a task outside the cluster
		} {
			h, err := st.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.RegisterParameterServerUpdate,
				Args: []any{r}, WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				var cs workflows.ClusterState
				err = h.Get(ctx, &cs)
			}
			t.Logf("registration %+v: %v", r, err)
			if err == nil || !strings.Contains(err.Error(), "not signed with this run's report key") {
				t.Errorf("registration %+v: %v, want a rejection for its signature", r, err)
			}
		}
	})
	forged := []workflows.CheckpointCommitted{
		{Step: 9e18, Loss: 0.01},                                // past max_steps: would silence every real commit below it
		{Step: first + save/2, Loss: 0.01},                      // a plausible step, between two commits, no signature
		{Step: maxSteps - save/2, Loss: 0.01},                   // ahead of training, no signature
		{Step: first + save/2 + 1, Signature: make([]byte, 64)}, // a signature of zeros
	}
	t.Run("checkpoint_committed", func(t *testing.T) {
		for _, cc := range forged {
			// A signal to a closed workflow is an error: nil means the job
			// was live to receive it.
			if err := st.Client.SignalWorkflow(ctx, id, "", workflows.CheckpointSignal, cc); err != nil {
				t.Fatalf("signal %+v: %v", cc, err)
			}
		}
	})
	cs, err := c.clusterState(id)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := c.committed(id, 1)
	peak, grew := mark.Growth(t)
	t.Logf("forged at committed steps %d to %d of %d; this process's peak RSS %d MiB, grew %d MiB while forging (the job's roles train in it); cluster %+v",
		first, now, maxSteps, peak>>20, grew>>20, cs)
	if grew > 512<<20 {
		t.Errorf("this process's peak RSS grew by %d MiB while forging, want under 512 MiB", grew>>20)
	}

	res, err := waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	d, err = st.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := d.GetWorkflowExecutionInfo().GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED || res.GlobalStep != maxSteps {
		t.Fatalf("job %v at step %d, want completed at %d", s, res.GlobalStep, maxSteps)
	}
	end, err := c.clusterState(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []workflows.ClusterState{cs, end} {
		for _, ps := range s.PS {
			if ps.Addr == attacker || ps.Host == "evil" || ps.Starts != 1 {
				t.Errorf("cluster lists %+v: the forged registration was applied", ps)
			}
		}
	}
	commits := checkCommits(t, events(t, res.JobDir))
	jd, err := jobdir.Open(ctx, res.JobDir, "")
	if err != nil {
		t.Fatal(err)
	}
	evals, bad, err := jd.ReadEvals(ctx)
	if err != nil || bad.N > 0 {
		t.Fatalf("eval records: %v, %d unreadable lines", err, bad.N)
	}
	var evaluated []int64
	for _, e := range evals {
		if jobdir.IsDefaultEval(e.Name) {
			evaluated = append(evaluated, e.GlobalStep)
		}
	}
	slices.Sort(evaluated)
	t.Logf("%d commits %v; evaluated %v; accuracy %.4f", len(commits), commits, evaluated, res.Metrics.Accuracy)
	if !slices.Equal(evaluated, commits) {
		t.Fatalf("evaluated steps %v, want exactly the committed steps %v", evaluated, commits)
	}
}
