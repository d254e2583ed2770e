package cli

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/opkey"
	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/worker"
	"github.com/trainflow/trainflow/workflows"
)

// cluster is the embedded Temporal server plus separate `trainflow worker`
// OS processes (this test binary, see TestMain).
type cluster struct {
	t       *testing.T
	st      *stack
	home    string
	opts    clusterOptions
	homes   []string // each process's --home
	procs   []*exec.Cmd
	metrics []string // each process's --metrics-listen address
	keys    string   // every process's --result-keys
}

// clusterOptions configures the worker processes of a cluster.
type clusterOptions struct {
	Workers int
	// MaxRoles is each process's --max-roles (0: no bound).
	MaxRoles int
	// Jobs is each process's --jobs ("": none, job dirs under --home).
	Jobs string
	// OwnHomes gives each process its own --home instead of the stack's.
	OwnHomes bool
	// DataRoots is a further --data-roots of each process, besides
	// testTrust's.
	DataRoots string
	// Metrics gives each process a --metrics-listen address, in
	// cluster.metrics.
	Metrics bool
	// Models is each process's --models ("": HOME/models).
	Models string
	// TemporalDB keeps the stack's Temporal state in this PostgreSQL
	// database ("": SQLite).
	TemporalDB string
	// Applications is each process's --applications file ("": none).
	Applications string
}

func newProcessCluster(t *testing.T, workers int) *cluster {
	return newClusterWith(t, clusterOptions{Workers: workers, MaxRoles: 2})
}

func newClusterWith(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	home := t.TempDir()
	st, err := startStack(context.Background(), stackConfig{Home: home, TemporalDB: opts.TemporalDB, FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoWorker: true,
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	trackStack(st)
	c := &cluster{t: t, st: st, home: home, opts: opts, homes: make([]string, opts.Workers), procs: make([]*exec.Cmd, opts.Workers),
		metrics: make([]string, opts.Workers)}
	// One result key for every process, as an operator gives each machine
	// the same file (docs/security.md); made here, before any process
	// could make its own.
	c.keys = keyfile.Results(home)
	if _, _, err := resultsig.LoadOrGenerate(c.keys); err != nil {
		t.Fatal(err)
	}
	// The operator's rollout key pair, its public half given to each
	// process (a worker on another machine holds only the .pub).
	if _, err := opkey.EnsurePair(keyfile.OperatorPrivate(home), keyfile.OperatorPublic(home)); err != nil {
		t.Fatal(err)
	}
	for i := range opts.Workers {
		c.homes[i] = home
		if opts.OwnHomes {
			c.homes[i] = t.TempDir()
		}
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
		st.Stop()
	})
	return c
}

// start runs worker process i.
func (c *cluster) start(i int) {
	exe, _ := os.Executable()
	args := []string{"worker", "--temporal", c.st.Temporal.FrontendAddr(), "--home", c.homes[i], "--log-level", "warn",
		"--ps-listen", "127.0.0.1", "--max-roles", strconv.Itoa(c.opts.MaxRoles), "--result-keys", c.keys}
	if c.opts.Jobs != "" {
		args = append(args, "--jobs", c.opts.Jobs)
	}
	if c.homes[i] != c.home { // the stack's worker token, as an operator hands it to each machine
		tok, err := worker.Token(c.home, false)
		if err != nil {
			c.t.Fatal(err)
		}
		args = append(args, "--api-key", tok, "--tls=false", "--operator-keys", keyfile.OperatorPublic(c.home))
	}
	args = append(args, testTrustArgs()...)
	if c.opts.DataRoots != "" {
		args = append(args, "--data-roots", c.opts.DataRoots)
	}
	if c.opts.Models != "" {
		args = append(args, "--models", c.opts.Models)
	}
	if c.opts.Applications != "" {
		args = append(args, "--applications", c.opts.Applications)
	}
	if c.opts.Metrics {
		if c.metrics[i] == "" {
			c.metrics[i] = freeAddr(c.t)
		}
		args = append(args, "--metrics-listen", c.metrics[i])
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = logWriter{c.t}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.procs[i] = cmd
}

// kill sends SIGKILL to worker process i (and its children).
func (c *cluster) kill(i int) {
	if p := c.procs[i]; p != nil && p.ProcessState == nil {
		syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		p.Wait()
	}
}

// clusterState queries the job's cluster.
func (c *cluster) clusterState(id string) (workflows.ClusterState, error) {
	var cs workflows.ClusterState
	v, err := c.st.Client.QueryWorkflow(context.Background(), id, "", workflows.ClusterQuery)
	if err == nil {
		err = v.Get(&cs)
	}
	return cs, err
}

// waitStep polls the job's progress until its committed global step
// reaches step.
func (c *cluster) waitStep(id string, step int64) workflows.Progress {
	c.t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		var p workflows.Progress
		v, err := c.st.Client.QueryWorkflow(context.Background(), id, "", workflows.ProgressQuery)
		if err == nil && v.Get(&p) == nil && p.GlobalStep >= step {
			return p
		}
		time.Sleep(100 * time.Millisecond) // polling a remote job, not synchronising goroutines
	}
	c.t.Fatalf("job %s never reached step %d", id, step)
	return workflows.Progress{}
}

// committed polls the events log in the job's directory under the shared
// home until a checkpoint at step or later is committed, and returns that
// step and the PID of each parameter server's latest start. It reads the
// disk rather than querying the workflow: a query waits for a workflow
// worker, and right after a kill that can take longer than the rest of the
// job.
func (c *cluster) committed(id string, step int64) (int64, []int) {
	c.t.Helper()
	dir := filepath.Join(c.home, "jobs", id)
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		// A line being appended can be incomplete: read again.
		if evs, err := activities.ReadEvents(context.Background(), dir); err == nil {
			var last int64
			ps := map[int]int{}
			for _, ev := range evs {
				switch r := ev.Record.(type) {
				case *jobdir.Checkpoint:
					last = max(last, r.GlobalStep)
				case *jobdir.PSStart:
					ps[r.Task] = r.PID
				}
			}
			if last >= step {
				var pids []int
				for _, p := range ps {
					pids = append(pids, p)
				}
				return last, pids
			}
		}
		time.Sleep(50 * time.Millisecond) // polling a remote job's files, not synchronising goroutines
	}
	c.t.Fatalf("job %s never committed step %d", id, step)
	return 0, nil
}

// events reads the job's events log (a local directory or object storage).
func events(t *testing.T, jobDir string) []jobdir.Event {
	t.Helper()
	evs, err := activities.ReadEvents(context.Background(), jobDir)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// distributedInput is a CUSTOM census job: the UCI Adult data when
// present, else generated rows.
func distributedInput(t *testing.T, id, cluster string, maxSteps, saveSteps int) string {
	data := `{"generated_rows":20000}`
	if _, err := os.Stat(filepath.Join(censusDir, "adult.data")); err == nil {
		abs, _ := filepath.Abs(censusDir)
		data = fmt.Sprintf(`{"dir":%q}`, abs)
	} else {
		t.Logf("UCI Adult not in %s: training on generated rows", censusDir)
	}
	return jobInput(id, data, cluster, maxSteps, saveSteps)
}

// jobInput is a census job on data (a DataSpec in JSON) with cluster (a
// ClusterSpec in JSON).
func jobInput(id, data, cluster string, maxSteps, saveSteps int) string {
	return fmt.Sprintf(`{"job_id":%q,"preset":"census","data":%s,"train":{"max_steps":%d,"save_checkpoints_steps":%d},
		"eval_spec":{"throttle_secs":0},"cluster":%s}`, id, data, maxSteps, saveSteps, cluster)
}

// faults counts parameter-server starts and retried workers in a job's
// events, and the most steps a parameter-server restart rolled back.
func faults(evs []jobdir.Event) (psStarts, retried int, maxLost int64) {
	for _, ev := range evs {
		switch r := ev.Record.(type) {
		case *jobdir.PSStart:
			psStarts++
		case *jobdir.WorkerStart:
			if r.Attempt > 1 {
				retried++
			}
		case *jobdir.PSRecovered:
			if r.Gen > 1 {
				maxLost = max(maxLost, r.LastStep-r.RestoreStep)
			}
		}
	}
	return psStarts, retried, maxLost
}

// checkCommits asserts that committed steps only grow and returns them.
func checkCommits(t *testing.T, evs []jobdir.Event) []int64 {
	t.Helper()
	var steps []int64
	for _, ev := range evs {
		if c, ok := ev.Record.(*jobdir.Checkpoint); ok {
			s := c.GlobalStep
			if len(steps) > 0 && s <= steps[len(steps)-1] {
				t.Fatalf("committed global step went backwards: %v then %d", steps, s)
			}
			steps = append(steps, s)
		}
	}
	return steps
}

func TestDistributedJobOnThreeProcesses(t *testing.T) {
	c := newProcessCluster(t, 3)
	for _, tc := range []struct {
		mode  string
		local int // cluster.local_steps
	}{{jobspec.UpdateAsync, 0}, {jobspec.UpdateSync, 0}, {jobspec.UpdateAsync, 8}} {
		name := tc.mode
		if tc.local > 0 {
			name += fmt.Sprintf("_local%d", tc.local)
		}
		t.Run(name, func(t *testing.T) {
			id := "dist_" + name
			cl := fmt.Sprintf(`{"scale_tier":"CUSTOM","worker_count":2,"parameter_server_count":2,"update":%q,"heartbeat_timeout_secs":4,"local_steps":%d}`, tc.mode, tc.local)
			start := time.Now()
			res, err := waitJob(t, startUIStyle(t, c.st.Client, id, distributedInput(t, id, cl, 4000, 400)))
			if err != nil {
				t.Fatal(err)
			}
			evs := events(t, res.JobDir)
			commits := checkCommits(t, evs)
			if steps := checkTrainEvents(t, filepath.Join(res.JobDir, filepath.FromSlash(jobdir.TrainLogsDir))); len(steps) < 20 || steps[len(steps)-1] > 4000 {
				t.Errorf("chief's summaries at steps %v, want at least 20 up to 4000", steps)
			}
			pids := map[int]bool{}
			for _, pid := range rolePIDs(evs) {
				pids[pid] = true
			}
			t.Logf("%s: accuracy %.4f at step %d in %s; commits %v; roles ran in %d processes", name, res.Metrics.Accuracy, res.GlobalStep, time.Since(start).Round(time.Millisecond), commits, len(pids))
			if len(pids) != 3 {
				t.Fatalf("5 roles ran in %d processes, want all 3 (each runs at most 2)", len(pids))
			}
			if res.GlobalStep != 4000 || commits[len(commits)-1] != 4000 {
				t.Fatalf("ended at step %d (commits %v), want 4000", res.GlobalStep, commits)
			}
			if res.Metrics.Accuracy < 0.85 {
				t.Fatalf("accuracy %.4f, want ≥ 0.85 (the training-engine bar)", res.Metrics.Accuracy)
			}
			d, err := c.st.Client.DescribeWorkflowExecution(context.Background(), id, "")
			if err != nil {
				t.Fatal(err)
			}
			if d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED || len(d.PendingActivities) != 0 {
				t.Fatalf("job %v with %d pending activities; want completed with none left", d.WorkflowExecutionInfo.Status, len(d.PendingActivities))
			}
		})
	}
}

// TestDistributedJobSurvivesKills kills worker processes with SIGKILL in the
// middle of a distributed job: twice a process running only workers (at
// random steps), then the process running parameter server 0, restarting
// each. The job completes, the committed step never goes back, a restart
// loses at most one checkpoint interval, and the accuracy stays within 0.5
// points of an undisturbed run of the same job. It runs with gradients and
// with local SGD (cluster.local_steps 8).
func TestDistributedJobSurvivesKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts worker processes (about 2 minutes per mode, gradients and local SGD); the fast suite runs TestDistributedJobOnThreeProcesses")
	}
	c := newProcessCluster(t, 3)
	const maxSteps, save = 16000, 400
	// local_steps 8 trains by local SGD (docs/distributed.md): killed
	// workers resume from the parameter servers' state as with gradients.
	for _, local := range []int{0, 8} {
		name := "gradients"
		if local > 0 {
			name = fmt.Sprintf("local%d", local)
		}
		t.Run(name, func(t *testing.T) { survivesKills(t, c, name, local, maxSteps, save) })
	}
}

// survivesKills is TestDistributedJobSurvivesKills with cluster.local_steps
// local, on cluster c.
func survivesKills(t *testing.T, c *cluster, name string, local int, maxSteps, save int64) {
	cl := fmt.Sprintf(`{"scale_tier":"CUSTOM","worker_count":2,"parameter_server_count":2,"update":"async","heartbeat_timeout_secs":4,"local_steps":%d}`, local)
	base, err := waitJob(t, startUIStyle(t, c.st.Client, "undisturbed_"+name, distributedInput(t, "undisturbed_"+name, cl, int(maxSteps), int(save))))
	if err != nil {
		t.Fatal(err)
	}
	id := "disturbed_" + name
	run := startUIStyle(t, c.st.Client, id, distributedInput(t, id, cl, int(maxSteps), int(save)))
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	// victim picks a process running (or not) a parameter server; ps are
	// the PIDs of the parameter servers' latest starts.
	victim := func(ps []int, wantPS bool) int {
		for i, p := range c.procs {
			if slices.Contains(ps, p.Process.Pid) == wantPS {
				return i
			}
		}
		return 0
	}
	at := int64(1200)
	for k, wantPS := range []bool{false, false, true} {
		at += int64(r.IntN(2000))
		// Never wait for a step past the job's last checkpoints.
		at = min(at, maxSteps-2*save)
		step, ps := c.committed(id, at)
		if step >= maxSteps {
			t.Fatalf("kill %d: the job finished before step %d was seen committed", k+1, at)
		}
		i := victim(ps, wantPS)
		t.Logf("kill %d: SIGKILL process %d (pid %d, parameter servers %v) at committed step %d", k+1, i, c.procs[i].Process.Pid, ps, step)
		c.kill(i)
		c.start(i)
		at = step + 2000
	}
	res, err := waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, res.JobDir)
	commits := checkCommits(t, evs)
	psStarts, retried, maxLost := faults(evs)
	t.Logf("undisturbed accuracy %.4f, disturbed %.4f; %d parameter-server starts, %d worker retries, most steps lost %d; %d commits", base.Metrics.Accuracy, res.Metrics.Accuracy, psStarts, retried, maxLost, len(commits))
	if res.GlobalStep != maxSteps || commits[len(commits)-1] != maxSteps {
		t.Fatalf("ended at step %d, want %d", res.GlobalStep, maxSteps)
	}
	if psStarts <= 2 || retried == 0 {
		t.Fatalf("%d parameter-server starts and %d worker retries: the kills did not hit the roles", psStarts, retried)
	}
	if maxLost > save+int64(local) { // a cut lands up to a round of local steps past its step
		t.Fatalf("a restart lost %d steps, more than one checkpoint interval (%d) and a round of local steps (%d)", maxLost, save, local)
	}
	// Async training orders its updates differently from run to run, so
	// two runs differ even undisturbed. Measured over 50 runs of the
	// gradients case on generated rows (5,000 eval rows, 2026-11-26):
	// undisturbed minus disturbed had mean +0.0001 and sd 0.0017, at most
	// +0.0048; of the 2,500 undisturbed/disturbed pairs across runs 0.7%
	// differed by more than 0.005 (the old bound, which CI once failed at
	// 0.0050) and none by more than 0.0068. 0.008 is the mean + 4.7 sd.
	if d := base.Metrics.Accuracy - res.Metrics.Accuracy; d > 0.008 {
		t.Fatalf("accuracy %.4f is %.4f below the undisturbed run's %.4f", res.Metrics.Accuracy, d, base.Metrics.Accuracy)
	}
}
