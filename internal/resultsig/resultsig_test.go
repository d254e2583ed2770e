package resultsig_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/resultsig"
)

// gate is an activity that tells the test it started (its activity ID)
// and waits for the test's release.
type gate struct {
	started chan string
	release chan struct{}
}

func (g *gate) Gate(ctx context.Context, i int) (string, error) {
	g.started <- activity.GetInfo(ctx).ActivityID
	select {
	case <-g.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return fmt.Sprintf("genuine-%d", i), nil
}

// Fail fails as a worker's activity does: an application error of type
// Refusal, not retried.
func (g *gate) Fail(ctx context.Context) error {
	return temporal.NewNonRetryableApplicationError("genuine refusal", "Refusal", nil)
}

// calls runs Gate n times in a row and joins the results; failing, it
// returns Fail's error.
func calls(ctx workflow.Context, n int, fail bool) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	if fail {
		return "", workflow.ExecuteActivity(ctx, "Fail").Get(ctx, nil)
	}
	var out []string
	for i := range n {
		var s string
		if err := workflow.ExecuteActivity(ctx, "Gate", i).Get(ctx, &s); err != nil {
			return "", err
		}
		out = append(out, s)
	}
	return strings.Join(out, ","), nil
}

type stack struct {
	c    client.Client
	ns   string
	keys *resultsig.Keyring
}

func startStack(t *testing.T) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := devserver.Start(ctx, devserver.Options{Home: t.TempDir(), FrontendAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start temporal: %v", err)
	}
	t.Cleanup(func() { s.Stop() })
	c, err := client.Dial(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace(), Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(c.Close)
	keys, _, err := resultsig.LoadOrGenerate(filepath.Join(t.TempDir(), "keys", "results.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &stack{c: c, ns: s.Namespace(), keys: keys}
}

// worker starts a worker of its own task queue with the interceptor of
// keys and returns its gate and task queue.
func (s *stack) worker(t *testing.T, keys *resultsig.Keyring) (*gate, string) {
	t.Helper()
	tq := "tq-" + strings.NewReplacer("/", "-").Replace(t.Name())
	g := &gate{started: make(chan string, 8), release: make(chan struct{})}
	w := worker.New(s.c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{resultsig.New(keys)}})
	w.RegisterWorkflowWithOptions(calls, workflow.RegisterOptions{Name: "Calls"})
	w.RegisterActivity(g)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return g, tq
}

func (s *stack) start(t *testing.T, tq string, n int, fail bool) client.WorkflowRun {
	t.Helper()
	run, err := s.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "wf-" + tq, TaskQueue: tq}, "Calls", n, fail)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func recv(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(time.Minute):
		t.Fatal("no activity started within a minute")
		return ""
	}
}

// history returns the run's events.
func (s *stack) history(t *testing.T, run client.WorkflowRun) *historypb.History {
	t.Helper()
	h := &historypb.History{}
	it := s.c.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// verdicts returns the side-effect markers' recorded verdicts, "" for a
// result taken.
func verdicts(t *testing.T, h *historypb.History) []string {
	t.Helper()
	var out []string
	for _, ev := range h.Events {
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil || m.MarkerName != "SideEffect" {
			continue
		}
		var v string
		if err := converter.GetDefaultDataConverter().FromPayloads(m.Details["data"], &v); err != nil {
			t.Fatalf("side effect marker: %v", err)
		}
		out = append(out, v)
	}
	return out
}

func scheduled(h *historypb.History) int {
	n := 0
	for _, ev := range h.Events {
		if ev.GetActivityTaskScheduledEventAttributes() != nil {
			n++
		}
	}
	return n
}

// TestForgedResultsAreRefused forges activity completions by ID through a
// plain Temporal client (as any namespace client, a sandboxed package
// among them, can) and checks that the workflow never uses them: it
// records the refusal, runs the activity again, and returns the genuine
// result. The history then replays with no key at all.
func TestForgedResultsAreRefused(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	forgedMAC := resultsig.Result{Signed: resultsig.Version, KeyID: s.keys.IDs()[0], ActivityID: "5", Attempt: 1,
		Encoding: "json/plain", Data: []byte(`"forged"`), MAC: make([]byte, 32)}
	for _, tc := range []struct {
		name   string
		forge  func(wf, run, act string) error
		reason string
	}{
		{"plain result", func(wf, run, act string) error {
			return s.c.CompleteActivityByID(ctx, s.ns, wf, run, act, map[string]bool{"blessed": true}, nil)
		}, "unsigned result"},
		{"envelope with a bad MAC", func(wf, run, act string) error {
			return s.c.CompleteActivityByID(ctx, s.ns, wf, run, act, forgedMAC, nil)
		}, "bad signature"},
		{"binary payload", func(wf, run, act string) error {
			return s.c.CompleteActivityByID(ctx, s.ns, wf, run, act, []byte("raw"), nil)
		}, "does not decode"},
		{"failure", func(wf, run, act string) error {
			return s.c.CompleteActivityByID(ctx, s.ns, wf, run, act, nil, temporal.NewNonRetryableApplicationError("forged", "InvalidSpec", nil))
		}, "unsigned failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, tq := s.worker(t, s.keys)
			run := s.start(t, tq, 1, false)
			first := recv(t, g.started)
			if err := tc.forge(run.GetID(), run.GetRunID(), first); err != nil {
				t.Fatalf("forge: %v", err)
			}
			again := recv(t, g.started) // the workflow ran the activity again
			if again == first {
				t.Fatalf("the activity started again under the same ID %s", first)
			}
			close(g.release)
			var got string
			if err := run.Get(ctx, &got); err != nil {
				t.Fatalf("workflow: %v", err)
			}
			if got != "genuine-0" {
				t.Fatalf("workflow result %q, want genuine-0", got)
			}
			h := s.history(t, run)
			v := verdicts(t, h)
			if len(v) != 2 || !strings.Contains(v[0], tc.reason) || v[1] != "" {
				t.Errorf("recorded verdicts %q, want [%q…, \"\"]", v, tc.reason)
			}
			if n := scheduled(h); n != 2 {
				t.Errorf("%d activities scheduled, want 2", n)
			}
			// A replayer without the key replays from the recorded verdicts.
			r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{Interceptors: []interceptor.WorkerInterceptor{resultsig.New(nil)}})
			if err != nil {
				t.Fatal(err)
			}
			r.RegisterWorkflowWithOptions(calls, workflow.RegisterOptions{Name: "Calls"})
			if err := r.ReplayWorkflowHistory(nil, h); err != nil {
				t.Errorf("replay without the key: %v", err)
			}
		})
	}
}

// TestReplayedSignedResultIsRefused takes the first call's genuine,
// signed result from the history and completes the second call with it:
// the signature covers the call's sequence number, so it is refused.
func TestReplayedSignedResultIsRefused(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	g, tq := s.worker(t, s.keys)
	run := s.start(t, tq, 2, false)
	recv(t, g.started)
	g.release <- struct{}{}
	second := recv(t, g.started)
	var genuine resultsig.Result
	for _, ev := range s.history(t, run).Events {
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			if err := converter.GetDefaultDataConverter().FromPayloads(a.Result, &genuine); err != nil {
				t.Fatal(err)
			}
		}
	}
	if genuine.Signed != resultsig.Version || string(genuine.Data) != `"genuine-0"` {
		t.Fatalf("first result in history: %+v, want a signed \"genuine-0\"", genuine)
	}
	if err := s.c.CompleteActivityByID(ctx, s.ns, run.GetID(), run.GetRunID(), second, genuine, nil); err != nil {
		t.Fatal(err)
	}
	recv(t, g.started)
	close(g.release)
	var got string
	if err := run.Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if got != "genuine-0,genuine-1" {
		t.Fatalf("result %q, want genuine-0,genuine-1", got)
	}
	if v := verdicts(t, s.history(t, run)); len(v) != 3 || v[0] != "" || !strings.Contains(v[1], "bad signature") || v[2] != "" {
		t.Errorf("verdicts %q, want a refusal for a bad signature between two results taken", v)
	}
}

// TestGenuineFailurePasses checks that a worker's own application failure
// reaches the workflow with its message, type and retryability, and that a
// worker with another key is refused until the call gives up.
func TestGenuineFailurePasses(t *testing.T) {
	s := startStack(t)
	_, tq := s.worker(t, s.keys)
	err := s.start(t, tq, 0, true).Get(context.Background(), nil)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != "Refusal" || !ae.NonRetryable() || !strings.Contains(ae.Error(), "genuine refusal") {
		t.Fatalf("workflow error %v, want the activity's non-retryable Refusal", err)
	}
}

// TestWrongKeyGivesUp runs workflows on a worker whose key differs from
// the activity worker's: every result is refused, MaxRefused times, then
// the call fails with ErrTypeRefused and a reason.
func TestWrongKeyGivesUp(t *testing.T) {
	s := startStack(t)
	other, _, err := resultsig.LoadOrGenerate(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	tq := "tq-wrong-key"
	wf := worker.New(s.c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{resultsig.New(s.keys)}, LocalActivityWorkerOnly: true})
	wf.RegisterWorkflowWithOptions(calls, workflow.RegisterOptions{Name: "Calls"})
	if err := wf.Start(); err != nil {
		t.Fatal(err)
	}
	defer wf.Stop()
	// The activities run on a second worker of the same queue with another key;
	// the first worker must not run them: it has none registered.
	aw := worker.New(s.c, tq, worker.Options{Interceptors: []interceptor.WorkerInterceptor{resultsig.New(other)}, DisableWorkflowWorker: true})
	aw.RegisterActivity(&gate{})
	if err := aw.Start(); err != nil {
		t.Fatal(err)
	}
	defer aw.Stop()
	err = s.start(t, tq, 0, true).Get(context.Background(), nil)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != resultsig.ErrTypeRefused || !strings.Contains(err.Error(), "which this worker does not hold") {
		t.Fatalf("workflow error %v, want %s naming the unknown key", err, resultsig.ErrTypeRefused)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hexKey := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string // error text; "" for success
	}{
		{"two keys", "# rotation\nnew " + hexKey + "\nold " + strings.Repeat("cd", 32) + "\n", 0o600, ""},
		{"readable by others", "k " + hexKey + "\n", 0o644, "others may read it"},
		{"short secret", "k abcd\n", 0o600, "want 32 bytes"},
		{"bad id", "k/1 " + hexKey + "\n", 0o600, "key id"},
		{"duplicate id", "k " + hexKey + "\nk " + hexKey + "\n", 0o600, "listed twice"},
		{"empty", "# nothing\n", 0o600, "no key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := resultsig.Load(write(tc.name, tc.content, tc.mode))
			if tc.want == "" {
				if err != nil || strings.Join(k.IDs(), ",") != "new,old" {
					t.Fatalf("Load: %v, ids %v", err, k.IDs())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, resultsig.ErrKeyFile) {
				t.Fatalf("Load error %v, want one mentioning %q", err, tc.want)
			}
			if strings.Contains(err.Error(), hexKey) {
				t.Errorf("the error prints the secret: %v", err)
			}
		})
	}
	if err := os.Symlink(filepath.Join(dir, "two keys"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := resultsig.Load(filepath.Join(dir, "link")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Load of a link: %v, want refused", err)
	}
	p := filepath.Join(dir, "gen", "results.key")
	k1, created, err := resultsig.LoadOrGenerate(p)
	if err != nil || !created {
		t.Fatalf("LoadOrGenerate: %v, created %t", err, created)
	}
	k2, created, err := resultsig.LoadOrGenerate(p)
	if err != nil || created || k1.IDs()[0] != k2.IDs()[0] {
		t.Fatalf("second LoadOrGenerate: %v, created %t, ids %v then %v", err, created, k1.IDs(), k2.IDs())
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("generated key file mode %v, want 0600", fi.Mode().Perm())
	}
}

// noop is an activity that returns its input.
func noop(_ context.Context, i int) (int, error) { return i, nil }

// loop runs noop n times in a row.
func loop(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	sum := 0
	for i := range n {
		var v int
		if err := workflow.ExecuteActivity(ctx, "Noop", i).Get(ctx, &v); err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// BenchmarkActivityRoundTrip measures one activity call of a workflow
// (schedule, run, complete, the workflow task that takes the result) on
// the embedded Temporal server, plain and with results signed and
// checked (the interceptor of a key): the signing's cost per activity,
// as a ratio in one run. The servers are the same but for the
// interceptor; tokens (devserver.Options.WorkerTokens) are measured in
// internal/devserver.
func BenchmarkActivityRoundTrip(b *testing.B) {
	ctx := context.Background()
	s, err := devserver.Start(ctx, devserver.Options{Home: b.TempDir(), FrontendAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	c, err := client.Dial(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace(), Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	keys, _, err := resultsig.LoadOrGenerate(filepath.Join(b.TempDir(), "results.key"))
	if err != nil {
		b.Fatal(err)
	}
	const calls = 20
	for _, mode := range []struct {
		name string
		keys *resultsig.Keyring
	}{{"plain", nil}, {"signed", keys}} {
		b.Run(mode.name, func(b *testing.B) {
			tq := "bench-" + mode.name
			var opts worker.Options
			if mode.keys != nil {
				opts.Interceptors = []interceptor.WorkerInterceptor{resultsig.New(mode.keys)}
			}
			w := worker.New(c, tq, opts)
			w.RegisterWorkflowWithOptions(loop, workflow.RegisterOptions{Name: "Loop"})
			w.RegisterActivityWithOptions(noop, activity.RegisterOptions{Name: "Noop"})
			if err := w.Start(); err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			n := 0
			for b.Loop() {
				n++
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-%d", tq, n), TaskQueue: tq}, "Loop", calls)
				if err != nil {
					b.Fatal(err)
				}
				var sum int
				if err := run.Get(ctx, &sum); err != nil || sum != calls*(calls-1)/2 {
					b.Fatalf("loop: %d, %v", sum, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*calls)/1e6, "ms/activity")
		})
	}
}
