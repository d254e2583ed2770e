package cli

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// answer is one answer the load saw.
type answer struct {
	at      time.Time
	version string
	code    int
	latency time.Duration
}

// load posts census predictions to url from two clients until stop, and
// keeps every answer.
type load struct {
	mu      sync.Mutex
	answers []answer
	stop    chan struct{}
	done    sync.WaitGroup
}

func startLoad(t *testing.T, url string, bodies [][]byte) *load {
	l := &load{stop: make(chan struct{})}
	for c := range 2 {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			cl := &http.Client{Timeout: 10 * time.Second}
			for i := c; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				resp, err := cl.Post(url, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
				a := answer{at: time.Now(), latency: time.Since(start)}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					a.code, a.version = resp.StatusCode, resp.Header.Get("X-Model-Version")
				}
				l.mu.Lock()
				l.answers = append(l.answers, a)
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.done.Wait()
}

// allFromBaselineOrCandidate halts the load and fails t unless every
// answer it saw was a 2xx from version 1 (the baseline) or 2 (the
// candidate).
func (l *load) allFromBaselineOrCandidate(t *testing.T) {
	t.Helper()
	l.halt()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.answers {
		if a.code != http.StatusOK || (a.version != "1" && a.version != "2") {
			t.Fatalf("answer %+v: want 2xx from version 1 or 2", a)
		}
	}
	t.Logf("%d answers, all 2xx from the baseline or the candidate", len(l.answers))
}

// between returns the answers received in [from, to).
func (l *load) between(from, to time.Time) []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []answer
	for _, a := range l.answers {
		if !a.at.Before(from) && a.at.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

func p99(as []answer) time.Duration {
	ls := make([]time.Duration, len(as))
	for i, a := range as {
		ls[i] = a.latency
	}
	slices.Sort(ls)
	if len(ls) == 0 {
		return 0
	}
	return ls[int(math.Ceil(0.99*float64(len(ls))))-1]
}

// constantBundle writes a copy of the fixture bundle whose weights are
// all zero, so it answers the first class for every row, as step 301.
func constantBundle(t *testing.T, fixture, parent string) *bundle.Bundle {
	t.Helper()
	ck, err := train.ReadCheckpoint(filepath.Join(fixture, bundle.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range ck.Tensors {
		clear(ts)
	}
	ck.Step = 301
	good, err := bundle.ReadDir(fixture, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range []string{bundle.TransformFile, bundle.SignatureFile} {
		if files[f], err = os.ReadFile(filepath.Join(fixture, f)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	st, err := storage.Open(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	meta := bundle.Meta{JobID: "broken", Exporter: "final", TransformHash: good.Meta.TransformHash}
	if _, err := bundle.Write(ctx, st, ck.Step, ck, files, meta); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.ReadDir(filepath.Join(parent, "301"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRolloutOnRealStack rolls census out on the dev stack (real
// Temporal, worker, prediction server, repository) under a steady load of
// two clients: a good candidate goes shadow → 50% → 100% and is promoted,
// with the share of answers per version during the 50% step within 3
// points of 50; a candidate that answers one class only rolls back at its
// first gate; a second rollout of the model while one runs is refused;
// no answer is ever non-2xx or from a third version; the history lists
// every change with the rollout's ID and gate values. With
// TRAINFLOW_RECORD_HISTORIES=1 it records the two rollouts' workflow
// histories (rollout_promoted, rollout_rolled_back) for the replay test
// if they are missing.
func TestRolloutOnRealStack(t *testing.T) {
	home := censusHome(t)
	st := testStack(t, home)
	ctx := context.Background()
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	broken := constantBundle(t, filepath.Join("..", "bundle", "testdata", "v1", "bundle"), t.TempDir())
	if v, _, err := repo.Publish(ctx, "census", "broken", broken, false); err != nil || v != 3 {
		t.Fatalf("publish the broken bundle: version %d, %v; want 3", v, err)
	}
	if err := st.Registry.Reload(); err != nil {
		t.Fatal(err)
	}
	bodies := predictBodies(t, 200)
	l := startLoad(t, "http://"+st.HTTPAddr+"/v1/models/census:predict", bodies)
	gates := rollout.Gates{MinRequests: 50, MaxErrorRate: 0.01, MaxClassShift: 0.15}
	// A baseline for the latency figure: the first 1000 answers.
	for deadline := time.Now().Add(time.Minute); ; {
		l.mu.Lock()
		n := len(l.answers)
		l.mu.Unlock()
		if n >= 1000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling the load's count, not a synchronisation
	}

	// The good candidate.
	started := time.Now()
	run, err := jobs.StartRollout(ctx, st.Client, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 2, Steps: []string{"shadow", "50", "100"},
		HoldSecs: 1.5, RecheckSecs: 0.5, Gates: gates, By: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.StartRollout(ctx, st.Client, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 3, Gates: gates})); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("a second rollout of census while one runs: got %v, want refused", err)
	}
	var res workflows.RolloutStatus
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := run.Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.State != workflows.RolloutPromoted || res.Baseline != 1 {
		t.Fatalf("good candidate: got %+v, want PROMOTED from 1", res)
	}
	record := os.Getenv("TRAINFLOW_RECORD_HISTORIES") != ""
	if record && todo("rollout_promoted") {
		saveHistory(t, st, run.GetID(), run.GetRunID(), "rollout_promoted")
	}
	if d, _ := repo.Default(ctx, "census"); d != 2 {
		t.Fatalf("default after the rollout: %d, want 2", d)
	}
	h, err := repo.History(ctx, "census")
	if err != nil || len(h) != 4 {
		t.Fatalf("history: %d records (%v), want shadow, 50, 100 and the promote", len(h), err)
	}
	for i, step := range []string{"shadow", "50", "100", "promote"} {
		if c := h[i].Cause; c.JobID != workflows.RolloutWorkflowID("census") || c.Step != step || (i > 0) != (c.Gates != nil) {
			t.Errorf("history[%d]: got cause %+v, want step %s of the rollout with gate values after the first", i, c, step)
		}
	}
	// The 50% step: answers from the first one of the candidate after its
	// routing change (the server applies a change a reload after it is
	// written; in the shadow step before, the candidate answers nothing)
	// to the next change, whose time is taken before it is written.
	var from time.Time
	for _, a := range l.between(h[1].Time, h[2].Time) {
		if a.version == "2" {
			from = a.at
			break
		}
	}
	half := l.between(from, h[2].Time)
	n2 := 0
	for _, a := range half {
		if a.version == "2" {
			n2++
		}
	}
	share := float64(n2) / float64(len(half))
	t.Logf("50%% step: %d answers, %.1f%% from the candidate (configured 50%%)", len(half), 100*share)
	if len(half) < 100 || math.Abs(share-0.5) > 0.03 {
		t.Errorf("50%% step: %.3f of %d answers from the candidate, want 0.50 ± 0.03 (σ ≈ 0.01)", share, len(half))
	}
	before := l.between(started.Add(-time.Hour), h[0].Time)
	shadow := l.between(h[0].Time.Add(500*time.Millisecond), h[1].Time)
	t.Logf("client p99 (rough, 2 clients on a shared 2-core machine): %v over %d answers before the rollout, %v over %d in the shadow step",
		p99(before), len(before), p99(shadow), len(shadow))

	// The broken candidate, from the new default 2.
	brokenStart := time.Now()
	run, err = jobs.StartRollout(ctx, st.Client, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 3, Steps: []string{"25", "100"},
		HoldSecs: 1.5, RecheckSecs: 0.5, Gates: gates, By: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.State != workflows.RolloutRolledBack || res.StepName != "25" || !strings.Contains(res.Reason, "class mix shift") {
		t.Fatalf("broken candidate: got %+v, want ROLLED_BACK at 25 for the class mix", res)
	}
	if record && todo("rollout_rolled_back") {
		saveHistory(t, st, run.GetID(), run.GetRunID(), "rollout_rolled_back")
	}
	if rt, _ := repo.Routing(ctx, "census"); !rt.IsZero() {
		t.Fatalf("routing after the rollback: %v, want none", rt)
	}
	h, _ = repo.History(ctx, "census")
	if last := h[len(h)-1]; last.Cause.Step != "rollback" || last.Cause.Gates == nil || last.Cause.Gates.ClassShift <= 0.15 {
		t.Fatalf("last history record: %+v, want the rollback with its class shift", last)
	}
	// The console's model page shows the traffic and the history.
	code, page := get(t, "http://"+st.HTTPAddr, "/console/models/census")
	if code != http.StatusOK || !strings.Contains(page, "the default answers every request") || strings.Count(page, `<tr class="change">`) != len(h) ||
		!strings.Contains(page, "rollout_census") || !strings.Contains(page, "rollback") || !strings.Contains(page, "default 1 → 2") ||
		!strings.Contains(page, `<a href="/console/models/census/rollout">rollout_census</a>`) {
		t.Errorf("console model page: %d, want the routing and %d history rows:\n%s", code, len(h), page)
	}
	// Its rollout page shows the ended rollout's outcome and why, from
	// the workflow's result; the model page links it.
	code, page = get(t, "http://"+st.HTTPAddr, "/console/models/census/rollout")
	if code != http.StatusOK || !strings.Contains(page, "ROLLED_BACK") || !strings.Contains(page, "class mix shift") || !strings.Contains(page, `<tr class="step failed"><td>25</td>`) {
		t.Errorf("console rollout page: %d, want ROLLED_BACK at 25 for the class mix:\n%s", code, page)
	}
	l.halt()
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := 0
	for _, a := range l.answers {
		// Before the broken rollout only the baseline 1 and candidate 2
		// answer; after it, 2 and 3.
		ok := a.version == "1" || a.version == "2"
		if !a.at.Before(brokenStart) {
			ok = a.version == "2" || a.version == "3"
		}
		if a.code != http.StatusOK || !ok {
			bad++
		}
	}
	if bad > 0 || len(l.answers) == 0 {
		t.Fatalf("%d of %d answers non-2xx or from a version that is neither baseline nor candidate", bad, len(l.answers))
	}
	t.Logf("%d answers, all 2xx from the baseline or the candidate", len(l.answers))

	// The CLI, as a user drives it. A rollout its checks refuse (an
	// unknown version) says so at once, without --wait, rather than that
	// it started, and rollout-status shows it FAILED with the reason.
	addr := st.Temporal.FrontendAddr()
	code, out, errs := cli(t, "models", "rollout", "census", "--candidate", "v9", "--temporal", addr, "--operator-key", keyfile.OperatorPrivate(home))
	if code != exitError || strings.Contains(out, "started") || !strings.Contains(errs, "refused") || !strings.Contains(errs, "candidate 9 is not a version of census") {
		t.Errorf("models rollout --candidate v9: exit %d, %q %q; want refused naming the candidate", code, out, errs)
	}
	code, out, errs = cli(t, "models", "rollout-status", "census", "--temporal", addr)
	if code != exitOK || !strings.HasPrefix(out, "census: FAILED\n") || !strings.Contains(out, "reason: ") || !strings.Contains(out, "candidate 9 is not a version of census") {
		t.Errorf("rollout-status of the refused rollout: exit %d, %q %q; want FAILED and why", code, out, errs)
	}
	// One it starts holds its first step; an abort signal rolls it back.
	code, out, errs = cli(t, "models", "rollout", "census", "--candidate", "v1", "--steps", "50,100", "--hold", "1h", "--temporal", addr, "--operator-key", keyfile.OperatorPrivate(home))
	if code != exitOK || !strings.HasPrefix(out, "started rollout rollout_census (run ") || strings.Contains(out, "still preparing") {
		t.Fatalf("models rollout --candidate v1: exit %d, %q %q; want started", code, out, errs)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		code, out, errs = cli(t, "models", "rollout-status", "census", "--temporal", addr)
		if strings.HasPrefix(out, "census: HOLDING at step 50, baseline 2, candidate 1, routing ") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the status a user reads, not a synchronisation
	}
	if code != exitOK || !strings.HasPrefix(out, "census: HOLDING at step 50, baseline 2, candidate 1, routing ") {
		t.Fatalf("rollout-status while the 50%% step holds: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs = cli(t, "models", "rollout-signal", "census", "abort", "--reason", "cli test", "--temporal", addr, "--operator-key", keyfile.OperatorPrivate(home)); code != exitOK {
		t.Fatalf("rollout-signal abort: exit %d, %q %q", code, out, errs)
	}
	if err := st.Client.GetWorkflow(ctx, workflows.RolloutWorkflowID("census"), "").Get(wctx, &res); err != nil || res.State != workflows.RolloutRolledBack {
		t.Fatalf("the aborted rollout: %+v, %v; want ROLLED_BACK", res, err)
	}
	code, out, errs = cli(t, "models", "rollout-status", "census", "--temporal", addr)
	if code != exitOK || !strings.HasPrefix(out, "census: ROLLED_BACK at step 50, baseline 2, candidate 1, routing default\n") || !strings.Contains(out, "reason: aborted: cli test") {
		t.Errorf("rollout-status of the aborted rollout: exit %d, %q %q", code, out, errs)
	}
	// Who started each rollout, as the server authenticated the caller:
	// the first through the stack's own client (the worker token), the
	// last by the CLI with the home's user token, whatever --by says.
	if h, err = repo.History(ctx, "census"); err != nil || len(h) < 6 {
		t.Fatalf("history after the CLI's rollout: %d records, %v", len(h), err)
	}
	if got, want := h[0].Cause.Caller, devserver.PrincipalWorker+":"+devserver.WorkerSubject; got != want {
		t.Errorf("caller of the first rollout's records = %q, want %q", got, want)
	}
	if got, want := h[len(h)-1].Cause.Caller, devserver.PrincipalUser+":"+stackUser(); got != want {
		t.Errorf("caller of the CLI's rollout's records = %q, want %q", got, want)
	}
	if code, out, _ = cli(t, "models", "history", "census", "--home", home); code != exitOK || !strings.Contains(out, "[started by "+devserver.PrincipalUser+":"+stackUser()+", per Temporal]") {
		t.Errorf("models history: exit %d %q, want the CLI's rollout shown as started by the stack's user", code, out)
	}
}

// TestModelsRouteCommand sets and clears a routing with `models route`,
// refuses bad ones with the field named and nothing changed, and lists
// the changes with `models history`.
func TestModelsRouteCommand(t *testing.T) {
	models := filepath.Join(t.TempDir(), "models")
	if err := os.CopyFS(filepath.Join(models, "census"), os.DirFS(filepath.Join("..", "bundle", "testdata", "v1", "repo", "census"))); err != nil {
		t.Fatal(err)
	}
	runCmd := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(append(args, "--models", models), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"models", "route", "census", "v1=90,v2=20"}, exitUsage, "sum to 110"},
		{[]string{"models", "route", "census", "v1=90,v7=10"}, exitError, "version 7 does not exist"},
		{[]string{"models", "route", "census", "v1=90,v2=-10,v3=20"}, exitUsage, "percent -10"},
		{[]string{"models", "route", "census", "v1=90,v2=10", "--shadow", "v9"}, exitError, "shadow version 9"},
		{[]string{"models", "route", "census", "v1=90,v2=10", "--shadow", "v2", "--by", "alice"}, exitOK, "default → 1=90,2=10 shadow=2"},
		{[]string{"models", "route", "census", "default", "--by", "alice", "--reason", "done"}, exitOK, "1=90,2=10 shadow=2 → default"},
	} {
		code, out, errs := runCmd(tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Fatalf("%v: exit %d, %q %q; want exit %d with %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
	code, out, errs := runCmd("models", "history", "census")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 || !strings.Contains(lines[0], "alice") || !strings.Contains(lines[1], "alice: done") {
		t.Fatalf("history: exit %d, %q %q; want the two changes by alice", code, out, errs)
	}
	if code, out, errs := runCmd("models", "history", "nomodel"); code != exitNotFound || !strings.Contains(errs, "model nomodel has no versions") {
		t.Fatalf("history of a model that does not exist: exit %d, %q %q; want exit %d (not found)", code, out, errs, exitNotFound)
	}
}

// TestRolloutSurvivesWorkerKill runs a rollout on a `trainflow worker`
// process killed with SIGKILL while the 50% step holds: a new worker
// resumes it at that step with the same split (no step set twice, none
// skipped) and promotes; every answer of the load is 2xx from the
// baseline or the candidate.
func TestRolloutSurvivesWorkerKill(t *testing.T) {
	home := censusHome(t)
	st := testStack(t, home, func(c *stackConfig) { c.NoWorker = true })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	startWorker := func() *exec.Cmd {
		cmd := exec.Command(exe, append([]string{"worker", "--temporal", st.Temporal.FrontendAddr(), "--home", home, "--log-level", "warn"}, testTrustArgs()...)...)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
	w := startWorker()
	defer func() { kill(w) }()
	bodies := predictBodies(t, 50)
	l := startLoad(t, "http://"+st.HTTPAddr+"/v1/models/census:predict", bodies)
	ctx := context.Background()
	run, err := jobs.StartRollout(ctx, st.Client, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 2, Steps: []string{"5", "50", "100"},
		HoldSecs: 3, RecheckSecs: 0.5, Gates: rollout.Gates{MinRequests: 20, MaxErrorRate: 0.01, MaxClassShift: 0.15}, By: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the 50% hold (polling the workflow's query).
	for deadline := time.Now().Add(2 * time.Minute); ; {
		v, err := st.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.RolloutStatusQuery)
		var s workflows.RolloutStatus
		if err == nil && v.Get(&s) == nil && s.StepName == "50" && s.State == workflows.RolloutHolding {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout never held its 50%% step: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling a remote state
	}
	kill(w)
	killed := time.Now()
	w = startWorker()
	var res workflows.RolloutStatus
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := run.Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("worker killed at the 50%% step; the rollout ended %s later: %s", time.Since(killed).Round(time.Millisecond), res.State)
	if res.State != workflows.RolloutPromoted {
		t.Fatalf("got %+v, want PROMOTED after the worker's kill", res)
	}
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
	if !slices.Equal(steps, []string{"5", "50", "100", "promote"}) {
		t.Fatalf("history steps: got %v, want each step once, in order", steps)
	}
	l.allFromBaselineOrCandidate(t)
}

// TestRolloutSurvivesStackRestart stops the whole dev stack (Temporal,
// worker, prediction server) while the rollout holds its 50% step and
// starts it again on the same home: the rollout resumes from Temporal's
// database at that step (its timer was durable) and promotes.
func TestRolloutSurvivesStackRestart(t *testing.T) {
	home := censusHome(t)
	bodies := predictBodies(t, 50)
	st := testStack(t, home)
	l := startLoad(t, "http://"+st.HTTPAddr+"/v1/models/census:predict", bodies)
	ctx := context.Background()
	run, err := jobs.StartRollout(ctx, st.Client, sayStart(t, home, workflows.RolloutInput{Model: "census", Candidate: 2, Steps: []string{"5", "50", "100"},
		HoldSecs: 3, RecheckSecs: 0.5, Gates: rollout.Gates{MinRequests: 20, MaxErrorRate: 0.01, MaxClassShift: 0.15}, By: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		v, err := st.Client.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.RolloutStatusQuery)
		var s workflows.RolloutStatus
		if err == nil && v.Get(&s) == nil && s.StepName == "50" && s.State == workflows.RolloutHolding {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout never held its 50%% step: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling a remote state
	}
	l.halt()
	if err := st.Stop(); err != nil {
		t.Fatal(err)
	}
	st2 := testStack(t, home)
	l2 := startLoad(t, "http://"+st2.HTTPAddr+"/v1/models/census:predict", bodies)
	var res workflows.RolloutStatus
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := clientRun(st2, run.GetID()).Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.State != workflows.RolloutPromoted {
		t.Fatalf("got %+v, want PROMOTED after the restart", res)
	}
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	h, _ := repo.History(ctx, "census")
	var steps []string
	for _, ch := range h {
		steps = append(steps, ch.Cause.Step)
	}
	if !slices.Equal(steps, []string{"5", "50", "100", "promote"}) {
		t.Fatalf("history steps: got %v, want each step once, in order", steps)
	}
	l2.halt()
	for _, ld := range []*load{l, l2} {
		for _, a := range ld.answers {
			// The stack's stop ends connections: a request cut by it is
			// not an answer (code 0); every answer is 2xx from 1 or 2.
			if a.code != 0 && (a.code != http.StatusOK || (a.version != "1" && a.version != "2")) {
				t.Fatalf("answer %+v: want 2xx from version 1 or 2", a)
			}
		}
	}
}
