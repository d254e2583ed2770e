package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/testenv/realtest"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// debianPython is Debian's Python, the one with python3-torch.
const debianPython = "/usr/bin/python3"

// appStack starts the dev stack with the applications of this test
// registered: tfconfig (cli/testdata/apps/tfconfig.py) and torch_census
// (examples/torch_census/trainer.py, reading the census data).
func appStack(t *testing.T) (*stack, string) {
	t.Helper()
	r, err := app.ParseRegistry([]byte(appRegistry(t)), "")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	return testStack(t, home, func(c *stackConfig) { c.Trust.applications = r }), home
}

// appRegistry is the --applications file of the tests.
func appRegistry(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(debianPython); err != nil {
		realtest.Missing(t, debianPython+" is missing (apt-get install python3)")
	}
	tfconfig, _ := filepath.Abs("testdata/apps/tfconfig.py")
	stall, _ := filepath.Abs("testdata/apps/stall.py")
	hpt, _ := filepath.Abs("testdata/apps/hpt.py")
	logs, _ := filepath.Abs("testdata/apps/logs.py")
	bundleApp, _ := filepath.Abs("testdata/apps/bundle.py")
	evaluator, _ := filepath.Abs("testdata/apps/evaluator.py")
	gate, _ := filepath.Abs("testdata/apps/gate.py")
	trainer, _ := filepath.Abs("../examples/torch_census/trainer.py")
	census := censusFiles(t)
	reg := fmt.Sprintf(`{"applications":{
		"tfconfig":{"argv":[%q,%q],"env":["TRAINFLOW_TEST_PASSED"]},
		"stall":{"argv":[%q,%q]},
		"hpt":{"argv":[%q,%q]},
		"logs":{"argv":[%q,%q]},
		"bundle":{"argv":[%q,%q]},
		"evaluator":{"argv":[%q,%q]},
		"gate":{"argv":[%q,%q]},
		"torch_census":{"argv":[%q,%q,"--train-files",%q,"--eval-files",%q]}}}`,
		debianPython, tfconfig, debianPython, stall, debianPython, hpt, debianPython, logs, debianPython, bundleApp, debianPython, evaluator, debianPython, gate, debianPython, trainer, filepath.Join(census, "adult.data"), filepath.Join(census, "adult.test"))
	return reg
}

// censusFiles is the directory of adult.data and adult.test: the UCI
// files when the repository's shared datasets are there, else census-like
// rows generated (internal/datagen).
func censusFiles(t *testing.T) string {
	t.Helper()
	if dir, _ := filepath.Abs(censusDir); fileExists(filepath.Join(dir, "adult.data")) {
		return dir
	}
	dir := t.TempDir()
	for name, n := range map[string]int{"adult.data": 20000, "adult.test": 5000} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := datagen.Census(f, n, 1, name == "adult.test"); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return dir
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func requireTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(debianPython, "-c", "import torch.distributed").Run(); err != nil {
		realtest.Missing(t, "Debian's PyTorch is missing (apt-get install python3-torch): "+err.Error())
	}
}

func appProgress(t *testing.T, st *stack, id string) workflows.Progress {
	t.Helper()
	v, err := st.Client.QueryWorkflow(context.Background(), id, "", workflows.ProgressQuery)
	if err != nil {
		t.Fatal(err)
	}
	var p workflows.Progress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

func replicaLog(t *testing.T, jobDir, replica string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(jobDir, filepath.FromSlash(jobdir.AppLogFile(replica))))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// line returns the value of the line of log starting with key=.
func line(log, key string) string {
	for l := range strings.Lines(log) {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\n"), key+"="); ok {
			return v
		}
	}
	return "<no " + key + " line>"
}

// TestApplicationTFConfig runs a program that prints its TF_CONFIG in
// BASIC, STANDARD_1 and CUSTOM clusters, started as the Temporal UI
// starts a job, and compares each replica's TF_CONFIG with the exact JSON
// of the seeds' format for the addresses the replicas registered. The
// args carry shell metacharacters: they arrive verbatim. The worker's own
// environment does not reach the program, except what the operator
// passes through.
func TestApplicationTFConfig(t *testing.T) {
	st, home := appStack(t)
	t.Setenv("TRAINFLOW_TEST_SECRET", "s3cret")
	t.Setenv("TRAINFLOW_TEST_PASSED", "passed")
	args := []string{"--x=1", "a b", ";rm -rf /tmp/nothing", "$(id)", "`id`", "*", "|", "'\""}
	argsJSON, _ := json.Marshal(args)
	jobs := []struct {
		id, cluster, tier string
		workers, ps       int
	}{
		{"tf_basic", `{}`, "BASIC", 0, 0},
		{"tf_standard", `{"scale_tier":"STANDARD_1"}`, "STANDARD_1", 4, 3},
		{"tf_custom", `{"scale_tier":"CUSTOM","worker_count":2,"parameter_server_count":1}`, "CUSTOM", 2, 1},
	}
	runs := make([]client.WorkflowRun, len(jobs))
	for i, j := range jobs {
		runs[i] = startUIStyle(t, st.Client, j.id, fmt.Sprintf(`{"job_id":%q,"application":{"name":"tfconfig","args":%s},"cluster":%s}`, j.id, argsJSON, j.cluster))
	}
	for i, j := range jobs {
		res, err := waitJob(t, runs[i])
		if err != nil {
			t.Fatalf("%s: %v", j.id, err)
		}
		if j.id == "tf_custom" {
			recordApp(t, st, j.id, "application_custom")
		}
		jobDir := filepath.Join(home, "jobs", j.id)
		if res.Export != filepath.Join(jobDir, "model") || !strings.Contains(res.Note, "nothing was published") {
			t.Errorf("%s: export %q note %q", j.id, res.Export, res.Note)
		}
		p := appProgress(t, st, j.id)
		if p.Phase != workflows.PhaseSucceeded || p.AppCluster == nil || p.AppCluster.Gen != 1 || len(p.AppCluster.Replicas) != 1+j.workers+j.ps {
			t.Fatalf("%s: progress %+v cluster %+v", j.id, p, p.AppCluster)
		}
		addrs := map[string][]string{}
		for _, r := range p.AppCluster.Replicas {
			addrs[r.Type] = append(addrs[r.Type], strconv.Quote(r.Addr))
		}
		cluster := `"chief":[` + addrs["chief"][0] + `]`
		if j.workers > 0 {
			cluster += `,"worker":[` + strings.Join(addrs["worker"], ",") + `]`
		}
		if j.ps > 0 {
			cluster += `,"ps":[` + strings.Join(addrs["ps"], ",") + `]`
		}
		for _, r := range p.AppCluster.Replicas {
			name := fmt.Sprintf("%s-%d", r.Type, r.Index)
			log := replicaLog(t, jobDir, name)
			want := fmt.Sprintf(`{"cluster":{%s},"task":{"type":%q,"index":%d,"trial":""},"job":{"scale_tier":%q,"worker_count":"%d","parameter_server_count":"%d","application":"tfconfig","args":%s,"job_dir":%q},"environment":"cloud"}`,
				cluster, r.Type, r.Index, j.tier, j.workers, j.ps, argsJSON, jobDir)
			if got := line(log, "TF_CONFIG"); got != want {
				t.Errorf("%s %s TF_CONFIG:\n got %s\nwant %s", j.id, name, got, want)
			}
			if got := line(log, "ARGS"); got != string(argsJSON) {
				t.Errorf("%s %s argv %s, want %s verbatim", j.id, name, got, argsJSON)
			}
			if got := line(log, "SECRET"); got != "<unset>" {
				t.Errorf("%s %s: the worker's environment leaked: TRAINFLOW_TEST_SECRET=%s", j.id, name, got)
			}
			if got := line(log, "PASSED"); got != "passed" {
				t.Errorf("%s %s: the operator's pass-through variable: %s", j.id, name, got)
			}
			wantRank := "<unset> WORLD_SIZE=<unset>"
			switch r.Type {
			case "chief":
				wantRank = fmt.Sprintf("0 WORLD_SIZE=%d", 1+j.workers)
			case "worker":
				wantRank = fmt.Sprintf("%d WORLD_SIZE=%d", r.Index+1, 1+j.workers)
			}
			if got := line(log, "RANK"); got != wantRank {
				t.Errorf("%s %s: RANK=%s, want %s", j.id, name, got, wantRank)
			}
		}
	}
}

// recordApp records the history of application job id as
// workflows/testdata/histories/name.json when TRAINFLOW_RECORD_HISTORIES
// is set and it is not recorded yet (see TestRecordHistories), which
// workflows' replay test then replays.
func recordApp(t *testing.T, st *stack, id, name string, proofs ...proof) {
	t.Helper()
	if os.Getenv("TRAINFLOW_RECORD_HISTORIES") == "" || !todo(name) {
		return
	}
	saveHistory(t, st, id, "", name, append(proofs, activityProof(workflows.AppReplicaActivity), versionProof("application-jobs"))...)
}

// TestApplicationRefusedOrStalled: an application the worker did not
// register, or a name that is no name, fails the job as InvalidSpec
// naming application.name, before anything runs; a replica that reports
// a step and then hangs stalls its generation, and MaxAppStalls stalled
// generations in a row fail the job as Stalled.
func TestApplicationRefusedOrStalled(t *testing.T) {
	st, home := appStack(t)
	// A replica that reports a step and then hangs is stalled: after
	// MaxAppStalls generations in a row the job fails as Stalled.
	stalled := startUIStyle(t, st.Client, "stalled", `{"job_id":"stalled","application":{"name":"stall"},"cluster":{"stall_timeout_secs":2}}`)
	for id, name := range map[string]string{"unreg": "not_registered", "path": "/bin/sh"} {
		_, err := waitJob(t, startUIStyle(t, st.Client, id, fmt.Sprintf(`{"job_id":%q,"application":{"name":%q,"args":["-c","touch /tmp/pwned"]}}`, id, name)))
		if !workflows.IsInvalidSpec(err) || !strings.Contains(err.Error(), "application.name") {
			t.Errorf("%s: %v, want InvalidSpec naming application.name", name, err)
		}
		if _, err := os.Stat(filepath.Join(home, "jobs", id, "logs")); err == nil {
			t.Errorf("%s: a replica ran", name)
		}
	}
	_, err := waitJob(t, stalled)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeStalled || !ae.NonRetryable() {
		t.Errorf("stalled job: %v, want a non-retryable %s error", err, workflows.ErrTypeStalled)
	}
	if p := appProgress(t, st, "stalled"); p.AppCluster.Gen != workflows.MaxAppStalls || p.GlobalStep != 1 {
		t.Errorf("stalled job: generation %d, step %d; want %d generations, step 1", p.AppCluster.Gen, p.GlobalStep, workflows.MaxAppStalls)
	}
}

// torchJob is the spec of a data-parallel census job over a chief and a
// worker, training epochs epochs.
func torchJob(id string, epochs int) string {
	return fmt.Sprintf(`{"job_id":%q,"application":{"name":"torch_census","args":["--epochs","%d","--learning-rate","0.1"]},
		"cluster":{"scale_tier":"CUSTOM","worker_count":1,"heartbeat_timeout_secs":10}}`, id, epochs)
}

// waitFile waits for path to exist while the job runs.
func waitFile(t *testing.T, st *stack, id, path string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		if p := appProgress(t, st, id); p.Phase == workflows.PhaseFailed || p.Phase == workflows.PhaseSucceeded {
			t.Fatalf("job %s ended (%s: %s) before %s appeared", id, p.Phase, p.Error, path)
		}
		time.Sleep(50 * time.Millisecond) // polling a file the program writes
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestApplicationTorchDDP trains census with PyTorch DDP (gloo) over a
// chief and a worker through the workflow, undisturbed, then again with
// the worker's process killed (SIGKILL) once the first checkpoint is
// committed: the generation restarts, the program resumes from its own
// checkpoint, and the job ends with the same accuracy. A third job is
// cancelled mid-run: no process of it is left.
func TestApplicationTorchDDP(t *testing.T) {
	requireTorch(t)
	st, home := appStack(t)
	const epochs = 8

	start := time.Now()
	res, err := waitJob(t, startUIStyle(t, st.Client, "ddp_calm", torchJob("ddp_calm", epochs)))
	if err != nil {
		t.Fatal(err)
	}
	calm := time.Since(start)
	jobDir := filepath.Join(home, "jobs", "ddp_calm")
	if _, err := os.Stat(filepath.Join(jobDir, "model", "model.pt")); err != nil {
		t.Errorf("no artifact: %v", err)
	}
	if res.Metrics.Accuracy < 0.8 || res.GlobalStep == 0 {
		t.Errorf("undisturbed: accuracy %.4f at step %d, want ≥ 0.8", res.Metrics.Accuracy, res.GlobalStep)
	}
	if log := replicaLog(t, jobDir, "worker-0"); !strings.Contains(log, fmt.Sprintf("epoch %d step", epochs)) {
		t.Errorf("the worker did not train every epoch:\n%s", log)
	}

	// kill -9 of the worker's program after the first checkpoint.
	start = time.Now()
	run := startUIStyle(t, st.Client, "ddp_kill", torchJob("ddp_kill", epochs))
	killDir := filepath.Join(home, "jobs", "ddp_kill")
	waitFile(t, st, "ddp_kill", filepath.Join(killDir, "app", "checkpoints", "epoch-1.pt"))
	victim := readPID(t, filepath.Join(killDir, "app", "work", "worker-0", "pid"))
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed, err := waitJob(t, run)
	if err != nil {
		t.Fatalf("killed replica: %v", err)
	}
	took := time.Since(start)
	p := appProgress(t, st, "ddp_kill")
	if p.AppCluster == nil || p.AppCluster.Gen < 2 {
		t.Errorf("cluster %+v: the generation did not restart", p.AppCluster)
	}
	if log := replicaLog(t, killDir, "chief-0"); !strings.Contains(log, "resumed from epoch-") {
		t.Errorf("the chief did not resume from its checkpoint:\n%s", log)
	}
	if d := math.Abs(killed.Metrics.Accuracy - res.Metrics.Accuracy); d > 0.005 {
		t.Errorf("accuracy %.4f after the kill, %.4f undisturbed: more than 0.5 point apart", killed.Metrics.Accuracy, res.Metrics.Accuracy)
	}
	recordApp(t, st, "ddp_kill", "application_killed", eventProof(enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED))
	t.Logf("FIGURES undisturbed: accuracy %.4f, %v; worker killed at epoch 1: accuracy %.4f, %v, %d generations",
		res.Metrics.Accuracy, calm.Round(time.Millisecond), killed.Metrics.Accuracy, took.Round(time.Millisecond), p.AppCluster.Gen)

	// Cancel mid-run: every replica's process group is gone.
	run = startUIStyle(t, st.Client, "ddp_cancel", torchJob("ddp_cancel", 1000))
	cancelDir := filepath.Join(home, "jobs", "ddp_cancel")
	waitFile(t, st, "ddp_cancel", filepath.Join(cancelDir, "app", "checkpoints", "epoch-1.pt"))
	pids := []int{readPID(t, filepath.Join(cancelDir, "app", "work", "chief-0", "pid")), readPID(t, filepath.Join(cancelDir, "app", "work", "worker-0", "pid"))}
	// Forged reports against the live job: an unsigned registration is
	// refused, an unsigned progress report ignored.
	ctx := context.Background()
	gen := appProgress(t, st, "ddp_cancel").AppCluster.Gen
	forged := workflows.ReplicaRegistration{Gen: gen, Type: workflows.ReplicaWorker, Index: 0, Addr: "203.0.113.1:1", RunID: run.GetRunID()}
	h, err := st.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: "ddp_cancel", RunID: run.GetRunID(),
		UpdateName: workflows.RegisterReplicaUpdate, Args: []any{forged}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "not signed with this run's report key") {
		t.Errorf("forged registration: %v, want a refusal", err)
	}
	if err := st.Client.SignalWorkflow(ctx, "ddp_cancel", "", workflows.AppProgressSignal, workflows.AppProgress{Step: 9e18}); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.CancelWorkflow(context.Background(), "ddp_cancel", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err == nil {
		t.Fatal("the cancelled job succeeded")
	}
	recordApp(t, st, "ddp_cancel", "application_cancelled", eventProof(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED))
	if p := appProgress(t, st, "ddp_cancel"); p.GlobalStep >= 9e18 || slices.ContainsFunc(p.AppCluster.Replicas, func(r workflows.AppReplica) bool { return r.Addr == forged.Addr }) {
		t.Errorf("forged reports applied: step %d, cluster %+v", p.GlobalStep, p.AppCluster)
	}
	for _, pid := range pids {
		if app.Alive(pid) {
			t.Errorf("process %d of the cancelled job is alive", pid)
		}
		if live := app.GroupMembers(pid); len(live) > 0 {
			t.Errorf("process group %d of the cancelled job has live members %v", pid, live)
		}
	}
}

// TestApplicationWorkerKilled kills (SIGKILL) the trainflow worker process
// running the worker replica of a DDP job, on a cluster of two worker
// processes each running one replica: the replica's program dies with it
// (no orphan), the lost replica is noticed by its heartbeat timeout, the
// generation restarts once the process is back, and the job succeeds from
// the program's checkpoint.
func TestApplicationWorkerKilled(t *testing.T) {
	requireTorch(t)
	regFile := filepath.Join(t.TempDir(), "applications.json")
	if err := os.WriteFile(regFile, []byte(appRegistry(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newClusterWith(t, clusterOptions{Workers: 2, MaxRoles: 1, Applications: regFile})
	const id = "ddp_wkill"
	start := time.Now()
	run := startUIStyle(t, c.st.Client, id, torchJob(id, 8))
	dir := filepath.Join(c.home, "jobs", id)
	waitFile(t, c.st, id, filepath.Join(dir, "app", "checkpoints", "epoch-1.pt"))
	p := appProgress(t, c.st, id)
	host := -1
	for _, r := range p.AppCluster.Replicas {
		if r.Type == workflows.ReplicaWorker {
			host = r.PID
		}
	}
	victim := readPID(t, filepath.Join(dir, "app", "work", "worker-0", "pid"))
	killed := false
	for i, proc := range c.procs {
		if proc.Process.Pid == host {
			c.kill(i)
			for deadline := time.Now().Add(10 * time.Second); app.Alive(victim) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond) // the kernel delivers PDEATHSIG asynchronously
			}
			if app.Alive(victim) {
				t.Errorf("the program (pid %d) outlived its worker process", victim)
			}
			c.start(i)
			killed = true
		}
	}
	if !killed {
		t.Fatalf("no worker process has pid %d (the worker replica's host)", host)
	}
	res, err := waitJob(t, run)
	if err != nil {
		t.Fatalf("worker process killed: %v", err)
	}
	p = appProgress(t, c.st, id)
	if p.AppCluster.Gen < 2 || res.Metrics.Accuracy < 0.8 {
		t.Errorf("generation %d, accuracy %.4f: want a restarted generation and accuracy ≥ 0.8", p.AppCluster.Gen, res.Metrics.Accuracy)
	}
	t.Logf("FIGURES worker process killed at epoch 1: accuracy %.4f, %v, %d generations", res.Metrics.Accuracy, time.Since(start).Round(time.Millisecond), p.AppCluster.Gen)
}

// TestApplicationTuning tunes an application: each trial runs the program
// with --name=value arguments after the job's own, reads the metric from
// its hypertune file, and the best trial is the one whose program wrote
// the best value; each trial's TF_CONFIG names its trial.
func TestApplicationTuning(t *testing.T) {
	st, home := appStack(t)
	spec := `{"job_id":"hp","application":{"name":"hpt","args":["--fixed","$(id)"]},
		"tuning":{"goal":"MAXIMIZE","hyperparameter_metric_tag":"score","max_trials":4,"max_parallel_trials":2,"algorithm":"GRID_SEARCH",
		"params":[{"parameter_name":"x","type":"DISCRETE","discrete_values":[0.1,0.3]},{"parameter_name":"opt","type":"CATEGORICAL","categorical_values":["sgd","adam"]}]}}`
	var payload map[string]any
	if err := json.Unmarshal([]byte(spec), &payload); err != nil {
		t.Fatal(err)
	}
	run, err := st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "hp", TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, payload)
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	recordApp(t, st, "hp_trial_1", "application_trial")
	rep := res.Tuning
	if rep == nil || len(rep.Trials) != 4 || rep.BestObjective == nil {
		t.Fatalf("tuning report %+v", rep)
	}
	best := rep.Trials[rep.BestTrial-1]
	if best.Params["x"] != "0.3" || best.Params["opt"] != "adam" || *rep.BestObjective != 1.01 {
		t.Errorf("best trial %d %v objective %v, want x=0.3 opt=adam with 1.01", best.Number, best.Params, *rep.BestObjective)
	}
	if !strings.Contains(res.Note, "nothing was published") || res.Export != best.Export || best.Export == "" {
		t.Errorf("result export %q note %q, best trial's export %q", res.Export, res.Note, best.Export)
	}
	for _, tr := range rep.Trials {
		dir := filepath.Join(home, "jobs", tr.ID)
		log := replicaLog(t, dir, "chief-0")
		if got := line(log, "SCORE"); strconv.FormatFloat(*tr.Objective, 'g', -1, 64) != strings.TrimSuffix(got, ".0") {
			t.Errorf("trial %d: objective %v, the program wrote %s", tr.Number, *tr.Objective, got)
		}
		p := appProgress(t, st, tr.ID)
		n := strconv.Itoa(tr.Number)
		want := fmt.Sprintf(`{"cluster":{"chief":[%q]},"task":{"type":"chief","index":0,"trial":%q},"job":{"scale_tier":"BASIC","worker_count":"0","parameter_server_count":"0","application":"hpt","args":["--fixed","$(id)","--x=%s","--opt=%s"],"job_dir":%q},"environment":"cloud"}`,
			p.AppCluster.Replicas[0].Addr, n, tr.Params["x"], tr.Params["opt"], dir)
		if got := line(log, "TF_CONFIG"); got != want {
			t.Errorf("trial %d TF_CONFIG:\n got %s\nwant %s", tr.Number, got, want)
		}
		if got := line(log, "TRIAL"); got != n {
			t.Errorf("trial %d: CLOUD_ML_TRIAL_ID %q", tr.Number, got)
		}
	}
}
