package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/workflows"
)

// censusHome makes a home whose model repository holds the fixture's
// census versions 1 and 2, 1 the default.
func censusHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	fixture := filepath.Join("..", "bundle", "testdata", "v1")
	if err := os.CopyFS(filepath.Join(home, "models", "census"), os.DirFS(filepath.Join(fixture, "repo", "census"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "models", "census", bundle.DefaultFile), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return home
}

// predictBodies are n held-out census rows, one :predict body each.
func predictBodies(t *testing.T, n int) [][]byte {
	instances, _ := heldOut(t, n)
	bodies := make([][]byte, len(instances))
	for i, inst := range instances {
		bodies[i], _ = json.Marshal(map[string]any{"instances": []any{inst}})
	}
	return bodies
}

// killGroup kills cmd's process group with SIGKILL (no handler runs, no
// deferred stop: what a crash or the OOM killer does) and reaps it.
func killGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

// devProcess is a `trainflow dev` child process (this test binary) and
// the addresses it printed.
type devProcess struct {
	cmd               *exec.Cmd
	temporal, predict string
}

// startDev starts `trainflow dev` on home in its own process group and
// waits for its "Press Ctrl-C" line, reading its Temporal and prediction
// addresses from what it prints first.
func startDev(t *testing.T, home string) *devProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"dev", "--home", home, "--temporal", "127.0.0.1:0", "--ui", "", "--http", "127.0.0.1:0", "--log-level", "warn"}, testTrustArgs()...)...)
	cmd.Stderr = logWriter{t}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devProcess{cmd: cmd}
	t.Cleanup(func() { killGroup(cmd) })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		switch {
		case len(f) >= 3 && f[0] == "Temporal" && f[1] == "API":
			d.temporal = f[2]
		case len(f) >= 2 && f[0] == "Predictions":
			d.predict = strings.TrimPrefix(strings.Split(f[1], "/v1/")[0], "http://")
		}
		if strings.HasPrefix(lines.Text(), "Press Ctrl-C") {
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if d.temporal == "" || d.predict == "" {
		t.Fatalf("trainflow dev printed no addresses (temporal %q, predictions %q)", d.temporal, d.predict)
	}
	return d
}

// rolloutStatus polls the rollout's status query until ok accepts it
// (the query answers once a worker runs the workflow).
func rolloutStatus(t *testing.T, c client.Client, id string, within time.Duration, ok func(workflows.RolloutStatus) bool) workflows.RolloutStatus {
	t.Helper()
	var s workflows.RolloutStatus
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) { // polling a remote state
		var v interface{ Get(any) error }
		if v, err = c.QueryWorkflow(context.Background(), id, "", workflows.RolloutStatusQuery); err == nil {
			if err = v.Get(&s); err == nil && ok(s) {
				return s
			}
		}
	}
	t.Fatalf("rollout %s: last status %+v (%v), never the one awaited", id, s, err)
	return s
}

// historySteps are the steps of the model's recorded routing changes.
func historySteps(t *testing.T, home string) ([]string, []bundle.Change) {
	t.Helper()
	ctx := context.Background()
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	h, err := repo.History(ctx, "census")
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, ch := range h {
		steps = append(steps, ch.Cause.Step)
	}
	return steps, h
}

// TestRolloutSurvivesDevKill9 kills the whole `trainflow dev` process
// (embedded Temporal server, worker and prediction server in one) with
// SIGKILL while a rollout holds its 50% step, and starts it again on the
// same home: the rollout is found at the same step with the same split,
// the restarted server answers from both versions in about that share,
// the rollout goes on to promote, and no step is set twice or skipped.
func TestRolloutSurvivesDevKill9(t *testing.T) {
	home := censusHome(t)
	bodies := predictBodies(t, 50)
	dev := startDev(t, home)
	c := dialAsUser(t, dev.temporal, home)
	l := startLoad(t, "http://"+dev.predict+"/v1/models/census:predict", bodies)
	ctx := context.Background()
	// A hold long enough to outlast the restart on a loaded machine, so
	// that the restarted stack is seen inside the 50% step.
	run, err := jobs.StartRollout(ctx, c, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 2, Steps: []string{"50", "100"},
		HoldSecs: 12, RecheckSecs: 0.5, Gates: rollout.Gates{MinRequests: 20, MaxErrorRate: 0.01, MaxClassShift: 0.15}, By: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	half := []rollout.Weight{{Version: 1, Percent: 50}, {Version: 2, Percent: 50}}
	rolloutStatus(t, c, run.GetID(), 2*time.Minute, func(s workflows.RolloutStatus) bool {
		return s.StepName == "50" && s.State == workflows.RolloutHolding
	})
	c.Close()
	killGroup(dev.cmd)
	killed := time.Now()
	l.halt()

	dev = startDev(t, home)
	restarted := time.Now()
	c = dialAsUser(t, dev.temporal, home)
	defer c.Close()
	s := rolloutStatus(t, c, run.GetID(), 2*time.Minute, func(workflows.RolloutStatus) bool { return true })
	t.Logf("dev killed with SIGKILL at the 50%% step; up again after %s; status %s at step %s", restarted.Sub(killed).Round(time.Millisecond), s.State, s.StepName)
	if s.StepName != "50" || !slices.Equal(s.Routing.Weights, half) || s.Routing.Shadow != 0 {
		t.Fatalf("after the restart: step %q routing %+v, want step 50 with %v", s.StepName, s.Routing, half)
	}
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	if rt, err := repo.Routing(ctx, "census"); err != nil || !slices.Equal(rt.Weights, half) {
		t.Fatalf("routing file after the restart: %+v (%v), want %v", rt, err, half)
	}
	repo.Close()
	l2 := startLoad(t, "http://"+dev.predict+"/v1/models/census:predict", bodies)
	var res workflows.RolloutStatus
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := c.GetWorkflow(ctx, run.GetID(), run.GetRunID()).Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	l2.halt()
	if res.State != workflows.RolloutPromoted {
		t.Fatalf("got %+v, want PROMOTED after the kill", res)
	}
	steps, h := historySteps(t, home)
	if !slices.Equal(steps, []string{"50", "100", "promote"}) {
		t.Fatalf("history steps: got %v, want each step once, in order", steps)
	}
	// The restarted server's answers in the rest of the 50% step.
	in50 := l2.between(restarted, h[1].Time)
	n2 := 0
	for _, a := range in50 {
		if a.version == "2" {
			n2++
		}
	}
	share := float64(n2) / float64(len(in50))
	t.Logf("after the restart, in the 50%% step: %d answers, %.1f%% from the candidate", len(in50), 100*share)
	if len(in50) < 50 || math.Abs(share-0.5) > 0.15 {
		t.Errorf("after the restart: %d of %d answers from the candidate in the 50%% step, want 50%% ± 15 (≥ 50 answers)", n2, len(in50))
	}
	for _, ld := range []*load{l, l2} {
		for _, a := range ld.answers {
			// The kill cuts connections: a request cut by it has no
			// answer (code 0); every answer is 2xx from 1 or 2.
			if a.code != 0 && (a.code != http.StatusOK || (a.version != "1" && a.version != "2")) {
				t.Fatalf("answer %+v: want 2xx from version 1 or 2", a)
			}
		}
	}
}

// TestRolloutSurvivesReplicaKill9 runs a rollout over two standalone
// `trainflow serve` replicas of one repository (beside the dev stack's
// Temporal, worker and server) with load on both, and kills one replica
// with SIGKILL during the 50% step: every answer of the surviving
// replica is 2xx from the baseline or the candidate, it answers from
// both in the 50% step, and the rollout promotes on the fleet's
// telemetry (the dead replica's counters stay in what it wrote).
func TestRolloutSurvivesReplicaKill9(t *testing.T) {
	home := censusHome(t)
	bodies := predictBodies(t, 50)
	st := testStack(t, home)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	replica := func(id string) (*exec.Cmd, string) {
		addr := freeAddr(t)
		cmd := exec.Command(exe, "serve", "--models", filepath.Join(home, "models"), "--http", addr, "--poll", "200ms",
			"--telemetry-interval", "500ms", "--server-id", id, "--console=false", "--log-level", "warn")
		cmd.Stderr = logWriter{t}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { killGroup(cmd) })
		url := "http://" + addr + "/v1/models/census:predict"
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // polling for the listener
			resp, err := http.Post(url, "application/json", strings.NewReader(string(bodies[0])))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s never answered: %v", id, err)
			}
		}
		return cmd, url
	}
	a, urlA := replica("replica_a")
	_, urlB := replica("replica_b")
	la := startLoad(t, urlA, bodies)
	lb := startLoad(t, urlB, bodies)
	ctx := context.Background()
	run, err := jobs.StartRollout(ctx, st.Client, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 2, Steps: []string{"50", "100"},
		HoldSecs: 4, RecheckSecs: 0.5, Gates: rollout.Gates{MinRequests: 20, MaxErrorRate: 0.01, MaxClassShift: 0.15}, By: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	rolloutStatus(t, st.Client, run.GetID(), 2*time.Minute, func(s workflows.RolloutStatus) bool {
		return s.StepName == "50" && s.State == workflows.RolloutHolding
	})
	killGroup(a)
	killed := time.Now()
	la.halt()
	var res workflows.RolloutStatus
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := run.Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	lb.halt()
	if res.State != workflows.RolloutPromoted {
		t.Fatalf("got %+v, want PROMOTED after replica_a's kill", res)
	}
	steps, h := historySteps(t, home)
	if !slices.Equal(steps, []string{"50", "100", "promote"}) {
		t.Fatalf("history steps: got %v, want each step once, in order", steps)
	}
	versions := map[string]int{}
	for _, x := range lb.between(killed, h[1].Time) {
		versions[x.version]++
	}
	t.Logf("replica_b after replica_a's kill, in the 50%% step: answers by version %v; %d answers in all", versions, len(lb.answers))
	if versions["1"] == 0 || versions["2"] == 0 {
		t.Errorf("replica_b in the 50%% step after the kill: answers by version %v, want both 1 and 2", versions)
	}
	bad := 0
	for _, x := range lb.answers {
		if x.code != http.StatusOK || (x.version != "1" && x.version != "2") {
			bad++
		}
	}
	if bad > 0 || len(lb.answers) == 0 {
		t.Fatalf("replica_b: %d of %d answers non-2xx or from a version that is neither baseline nor candidate", bad, len(lb.answers))
	}
}
