package devserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

var (
	stateKey  = temporal.NewSearchAttributeKeyKeyword("TrainflowState")
	metricKey = temporal.NewSearchAttributeKeyFloat64("TrainflowBestMetric")

	testAttrs = map[string]enumspb.IndexedValueType{
		stateKey.GetName():  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		metricKey.GetName(): enumspb.INDEXED_VALUE_TYPE_DOUBLE,
	}
)

// echoWorkflow is the trivial workflow the tests run.
func echoWorkflow(_ workflow.Context, s string) (string, error) { return s, nil }

func TestStartServesFrontendAndUI(t *testing.T) {
	s := startServer(t, Options{
		Home:             t.TempDir(),
		FrontendAddr:     "127.0.0.1:0",
		UIAddr:           "127.0.0.1:0",
		SearchAttributes: testAttrs,
		Logger:           testLogger(t),
	})
	if got, want := s.Namespace(), DefaultNamespace; got != want {
		t.Errorf("Namespace() = %q, want %q", got, want)
	}
	if _, port, _ := net.SplitHostPort(s.FrontendAddr()); port == "0" || port == "" {
		t.Errorf("FrontendAddr() = %q, want a concrete port", s.FrontendAddr())
	}
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Fatalf("CheckHealth: %v", err)
	}
	checkSearchAttributes(ctx, t, c, s.Namespace(), testAttrs)
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.Namespace()})
	if err != nil {
		t.Fatalf("DescribeNamespace: %v", err)
	}
	if got := ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != Retention {
		t.Errorf("retention = %v, want %v", got, Retention)
	}

	t.Run("ui", func(t *testing.T) {
		if !strings.HasPrefix(s.UIURL(), "http://127.0.0.1:") {
			t.Fatalf("UIURL() = %q, want http://127.0.0.1:<port>", s.UIURL())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.UIURL()+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s/: %v", s.UIURL(), err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read body: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /: status %d, want %d", resp.StatusCode, http.StatusOK)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("GET /: Content-Type %q, want text/html", ct)
		}
		if !strings.Contains(strings.ToLower(string(body)), "<html") {
			t.Errorf("GET /: body has no <html: %.200q", body)
		}
	})

	t.Run("ui reaches frontend", func(t *testing.T) {
		url := s.UIURL() + "/api/v1/namespaces/" + s.Namespace()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read body: %v", err)
		}
		var got struct {
			NamespaceInfo struct{ Name string }
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil || got.NamespaceInfo.Name != s.Namespace() {
			t.Errorf("GET %s: status %d, body %.300q; want 200 describing namespace %s", url, resp.StatusCode, body, s.Namespace())
		}
	})

	t.Run("typed search attribute", func(t *testing.T) {
		state := "X"
		id := runEcho(ctx, t, c, "sa-wf", temporal.NewSearchAttributes(stateKey.ValueSet(state), metricKey.ValueSet(0.25)))
		query := fmt.Sprintf("%s=%q", stateKey.GetName(), state)
		// Visibility is written asynchronously after the workflow closes.
		err := poll(ctx, "visibility", func(ctx context.Context) error {
			resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.Namespace(), Query: query})
			if err != nil {
				return &permanentError{fmt.Errorf("ListWorkflow(%s): %w", query, err)}
			}
			for _, e := range resp.GetExecutions() {
				if e.GetExecution().GetWorkflowId() == id && e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
					return nil
				}
			}
			return fmt.Errorf("ListWorkflow(%s) = %d executions, none is completed %s", query, len(resp.GetExecutions()), id)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestRestartKeepsHistory(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := Options{Home: home, FrontendAddr: "127.0.0.1:0", SearchAttributes: testAttrs, Logger: testLogger(t)}

	s1 := startServer(t, opts)
	c1 := dial(t, s1)
	id := runEcho(ctx, t, c1, "restart-wf", temporal.SearchAttributes{})
	aliases1 := aliases(ctx, t, c1, s1.Namespace())
	wal := filepath.Join(home, DBFile+"-wal")
	if fi, err := os.Stat(wal); err != nil || fi.Size() == 0 {
		t.Errorf("while running: stat %s: %v (size %d), want a non-empty write-ahead log", wal, err, sizeOf(fi))
	}
	c1.Close()
	if err := s1.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := s1.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if fi, err := os.Stat(wal); err == nil && fi.Size() != 0 {
		t.Errorf("after Stop %s has %d bytes, want 0 (checkpointed)", wal, fi.Size())
	}

	s2 := startServer(t, opts)
	if s2.FrontendAddr() == s1.FrontendAddr() {
		t.Logf("restart reused frontend address %s", s2.FrontendAddr())
	}
	c2 := dial(t, s2)
	desc, err := c2.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatalf("DescribeWorkflowExecution(%s) after restart: %v", id, err)
	}
	if got, want := desc.GetWorkflowExecutionInfo().GetStatus(), enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED; got != want {
		t.Errorf("status of %s after restart = %v, want %v", id, got, want)
	}
	checkSearchAttributes(ctx, t, c2, s2.Namespace(), testAttrs)
	if aliases2 := aliases(ctx, t, c2, s2.Namespace()); !maps.Equal(aliases2, aliases1) {
		t.Errorf("search attribute columns after restart = %v, want unchanged %v", aliases2, aliases1)
	}

	t.Run("home in use", func(t *testing.T) {
		_, err := Start(ctx, Options{Home: home, FrontendAddr: "127.0.0.1:0", Logger: testLogger(t)})
		if !errors.Is(err, ErrHomeInUse) {
			t.Fatalf("second Start on a home in use: err = %v, want %v", err, ErrHomeInUse)
		}
	})

	t.Run("search attribute type conflict", func(t *testing.T) {
		c2.Close()
		if err := s2.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		conflict := map[string]enumspb.IndexedValueType{stateKey.GetName(): enumspb.INDEXED_VALUE_TYPE_INT}
		s3, err := Start(ctx, Options{Home: home, FrontendAddr: "127.0.0.1:0", SearchAttributes: conflict, Logger: testLogger(t)})
		if err == nil {
			_ = s3.Stop()
			t.Fatalf("Start with %v: no error, want %v", conflict, ErrSearchAttributeType)
		}
		if !errors.Is(err, ErrSearchAttributeType) || !strings.Contains(err.Error(), stateKey.GetName()) {
			t.Fatalf("Start with %v: err = %v, want %v naming %s", conflict, err, ErrSearchAttributeType, stateKey.GetName())
		}
	})
}

func TestStartAddressInUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(busy string) Options
	}{
		{"ui", func(busy string) Options { return Options{FrontendAddr: "127.0.0.1:0", UIAddr: busy} }},
		{"frontend", func(busy string) Options { return Options{FrontendAddr: busy} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			busy := l.Addr().String()
			home := t.TempDir()
			opts := tc.opts(busy)
			opts.Home, opts.Logger = home, testLogger(t)

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := Start(ctx, opts)
			if err == nil {
				_ = s.Stop()
				t.Fatalf("Start with %s on busy %s: no error", tc.name, busy)
			}
			if !strings.Contains(err.Error(), busy) {
				t.Errorf("Start error %q does not mention %s", err, busy)
			}
			// A failed Start releases Home.
			f, err := lockHome(filepath.Join(home, LockFile))
			if err != nil {
				t.Fatalf("lock home after failed Start: %v", err)
			}
			f.Close()
		})
	}
}

func TestMissingSearchAttributes(t *testing.T) {
	const (
		kw  = enumspb.INDEXED_VALUE_TYPE_KEYWORD
		dbl = enumspb.INDEXED_VALUE_TYPE_DOUBLE
		dt  = enumspb.INDEXED_VALUE_TYPE_DATETIME
	)
	system := map[string]enumspb.IndexedValueType{"StartTime": dt}
	for _, tc := range []struct {
		name         string
		want, custom map[string]enumspb.IndexedValueType
		missing      map[string]enumspb.IndexedValueType
		conflict     string
	}{
		{name: "none wanted", custom: map[string]enumspb.IndexedValueType{"A": kw}, missing: map[string]enumspb.IndexedValueType{}},
		{name: "all missing", want: map[string]enumspb.IndexedValueType{"A": kw, "B": dbl}, missing: map[string]enumspb.IndexedValueType{"A": kw, "B": dbl}},
		{name: "some present", want: map[string]enumspb.IndexedValueType{"A": kw, "B": dbl}, custom: map[string]enumspb.IndexedValueType{"A": kw}, missing: map[string]enumspb.IndexedValueType{"B": dbl}},
		{name: "all present", want: map[string]enumspb.IndexedValueType{"A": kw}, custom: map[string]enumspb.IndexedValueType{"A": kw, "C": dbl}, missing: map[string]enumspb.IndexedValueType{}},
		{name: "custom type differs", want: map[string]enumspb.IndexedValueType{"A": dbl}, custom: map[string]enumspb.IndexedValueType{"A": kw}, conflict: "A is"},
		{name: "system type differs", want: map[string]enumspb.IndexedValueType{"StartTime": kw}, conflict: "StartTime is"},
		{name: "system type matches", want: map[string]enumspb.IndexedValueType{"StartTime": dt}, missing: map[string]enumspb.IndexedValueType{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := missingSearchAttributes(tc.want, tc.custom, system)
			if tc.conflict != "" {
				if !errors.Is(err, ErrSearchAttributeType) || !strings.Contains(err.Error(), tc.conflict) {
					t.Fatalf("err = %v, want %v mentioning %q", err, ErrSearchAttributeType, tc.conflict)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if !maps.Equal(got, tc.missing) {
				t.Errorf("missing = %v, want %v", got, tc.missing)
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no home", Options{}, "Home"},
		{"bad frontend host", Options{Home: t.TempDir(), FrontendAddr: "example.com:0"}, "example.com"},
		{"unspecified attribute type", Options{Home: t.TempDir(), SearchAttributes: map[string]enumspb.IndexedValueType{"A": 0}}, "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Logger = testLogger(t)
			s, err := Start(ctx, tc.opts)
			if err == nil {
				_ = s.Stop()
				t.Fatalf("Start(%+v): no error", tc.opts)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return -1
	}
	return fi.Size()
}

// startServer starts a server with opts and stops it when the test ends.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	// Start takes well under a second here; a restart whose matching
	// service cannot join the membership ring takes about 45 s.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v (frontend %s, ui %q)", time.Since(begin).Round(time.Millisecond), s.FrontendAddr(), s.UIURL())
	t.Cleanup(func() {
		begin := time.Now()
		if err := s.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		t.Logf("Stop took %v", time.Since(begin).Round(time.Millisecond))
	})
	return s
}

// dial returns a client of s's namespace, closed when the test ends.
func dial(t *testing.T, s *Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace(), Logger: nopSDKLogger{}})
	if err != nil {
		t.Fatalf("dial %s: %v", s.FrontendAddr(), err)
	}
	t.Cleanup(c.Close)
	return c
}

// runEcho runs echoWorkflow with ID id and search attributes sa on a worker
// of its own and waits for its result; it returns id.
func runEcho(ctx context.Context, t *testing.T, c client.Client, id string, sa temporal.SearchAttributes) string {
	t.Helper()
	taskQueue := "tq-" + id
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(echoWorkflow, workflow.RegisterOptions{Name: "Echo"})
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	defer w.Stop()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             taskQueue,
		TypedSearchAttributes: sa,
	}, "Echo", "hello")
	if err != nil {
		t.Fatalf("start workflow %s: %v", id, err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil {
		t.Fatalf("workflow %s: %v", id, err)
	}
	if got != "hello" {
		t.Fatalf("workflow %s = %q, want %q", id, got, "hello")
	}
	return id
}

// checkSearchAttributes fails t unless every attribute of want is listed
// with its type.
func checkSearchAttributes(ctx context.Context, t *testing.T, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) {
	t.Helper()
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		t.Fatalf("ListSearchAttributes: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if got, ok := resp.GetCustomAttributes()[name]; !ok || got != want[name] {
			t.Errorf("search attribute %s: got %v (listed %t), want %v", name, got, ok, want[name])
		}
	}
}

// aliases returns the namespace's custom search attribute column → name map.
func aliases(ctx context.Context, t *testing.T, c client.Client, namespace string) map[string]string {
	t.Helper()
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		t.Fatalf("DescribeNamespace: %v", err)
	}
	return resp.GetConfig().GetCustomSearchAttributeAliases()
}

// testLogger returns a logger writing to the test's output until the test
// ends, then discarding: server goroutines may outlive a failed test.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{w: t.Output()}
	t.Cleanup(func() {
		w.mu.Lock()
		w.w = io.Discard
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// nopSDKLogger silences the SDK's client and worker logs in tests.
type nopSDKLogger struct{}

func (nopSDKLogger) Debug(string, ...any) {}
func (nopSDKLogger) Info(string, ...any)  {}
func (nopSDKLogger) Warn(string, ...any)  {}
func (nopSDKLogger) Error(string, ...any) {}

// killHelperEnv names the Home that TestKillHelper serves when the test
// binary runs it as a child process.
const killHelperEnv = "DEVSERVER_KILL_HELPER_HOME"

func TestSurvivesKill(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKillHelper$")
	cmd.Env = append(os.Environ(), killHelperEnv+"="+home)
	cmd.Stderr = t.Output()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	var id string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "COMPLETED "); ok {
			id = rest
			break
		}
	}
	// SIGKILL: no Stop, no checkpoint, no unlock; harsher than Ctrl-C.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill helper: %v", err)
	}
	_ = cmd.Wait()
	if id == "" {
		t.Fatalf("helper exited without completing a workflow (scan error: %v)", sc.Err())
	}

	s := startServer(t, Options{Home: home, FrontendAddr: "127.0.0.1:0", Logger: testLogger(t)})
	desc, err := dial(t, s).DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatalf("DescribeWorkflowExecution(%s) after kill: %v", id, err)
	}
	if got, want := desc.GetWorkflowExecutionInfo().GetStatus(), enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED; got != want {
		t.Errorf("status of %s after kill = %v, want %v", id, got, want)
	}
}

// TestKillHelper is the child process of TestSurvivesKill: it runs a
// workflow to completion, reports its ID on stdout and waits to be killed.
func TestKillHelper(t *testing.T) {
	home := os.Getenv(killHelperEnv)
	if home == "" {
		t.Skip("runs only as the child process of TestSurvivesKill")
	}
	s, err := Start(context.Background(), Options{Home: home, FrontendAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	ctx := context.Background()
	id := runEcho(ctx, t, dial(t, s), "killed-wf", temporal.SearchAttributes{})
	fmt.Println("COMPLETED " + id)
	select {} // until killed
}
