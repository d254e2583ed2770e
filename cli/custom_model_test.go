package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// exampleDir is the custom-model example: a module of its own (so go
// test ./... at the root skips it, and this test builds it).
const exampleDir = "../examples/custom_model"

// TestCustomModelExample builds examples/custom_model — trainflow's
// commands with one model type of its own, "polynomial" — and runs a job
// of that type end to end on its embedded stack (`dev`: Temporal, worker,
// training children, prediction server, all of that binary), queries the
// model it published, then points this build's default server (the
// built-in types only) at the same model repository: it refuses the
// bundle naming the type, and answers 404 for the model.
func TestCustomModelExample(t *testing.T) {
	home := t.TempDir()
	exe := filepath.Join(t.TempDir(), "custom_model")
	build := exec.Command("go", "build", "-o", exe, ".")
	build.Dir = exampleDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", exampleDir, err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dev := exec.Command(exe, "dev", "--home", home, "--temporal", "127.0.0.1:0", "--ui", "", "--http", "127.0.0.1:0")
	dev.Stderr = logWriter{t}
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			dev.Process.Signal(os.Interrupt)
			done := make(chan error, 1)
			go func() { done <- dev.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("custom_model dev: %v", err)
				}
			case <-time.After(time.Minute):
				dev.Process.Kill()
				t.Errorf("custom_model dev did not stop on SIGINT")
			}
		})
	}
	defer stop()
	// dev prints its addresses, then "Press Ctrl-C to stop." once up.
	var temporalAddr, httpAddr string
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		switch {
		case len(f) >= 3 && f[0] == "Temporal" && f[1] == "API":
			temporalAddr = f[2]
		case len(f) >= 2 && f[0] == "Predictions":
			httpAddr = strings.TrimPrefix(strings.Split(f[1], "/v1/")[0], "http://")
		}
		if strings.HasPrefix(lines.Text(), "Press Ctrl-C") {
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if temporalAddr == "" || httpAddr == "" {
		t.Fatalf("custom_model dev printed no addresses (temporal %q, http %q)", temporalAddr, httpAddr)
	}

	c := dialAsUser(t, temporalAddr, home)
	defer c.Close()
	spec := jobspec.JobSpec{JobID: "poly_1", Preset: jobspec.PresetCensus, ModelName: "poly",
		Data:  jobspec.DataSpec{GeneratedRows: 600, TrainShards: 1, EvalShards: 1},
		Model: jobspec.ModelSpec{Type: "polynomial", Config: json.RawMessage(`{"degree": 2}`), LearningRate: 0.05},
		Train: jobspec.TrainSpec{MaxSteps: 60, SaveCheckpointsSteps: 60}}
	run, err := jobs.Start(ctx, c, spec)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.JobResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("polynomial job on the custom binary: %v", err)
	}
	t.Logf("polynomial job: %d steps, eval %s", res.GlobalStep, res.Metrics.Summary())
	if res.Model != "poly" || res.Version != 1 || res.Metrics.Accuracy < 0.7 || res.Metrics.AUC < 0.7 {
		t.Fatalf("job result: model %q version %d, eval %s; want poly version 1, accuracy ≥ 0.7 and auc ≥ 0.7 (a constant guess has auc 0.5)", res.Model, res.Version, res.Metrics.Summary())
	}
	body := `{"instances": [` + demoInstance + `]}`
	code, answer := postJSON(t, "http://"+httpAddr+"/v1/models/poly:predict", body)
	if code != http.StatusOK || !strings.Contains(string(answer), `"probabilities"`) {
		t.Fatalf("custom server: %d %s", code, answer)
	}
	stop()

	// The default binary's server, on the same repository.
	addr := freeAddr(t)
	var logs lockedBuffer
	sctx, scancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- runServe(sctx, nil, []string{"--models", filepath.Join(home, "models"), "--http", addr, "--console=false", "--log-level", "info"}, &logs)
	}()
	defer func() {
		scancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var resp *http.Response
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // polling for the listener, not synchronising
		if resp, err = http.Post("http://"+addr+"/v1/models/poly:predict", "application/json", strings.NewReader(body)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	answer, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("default server answered the polynomial model: %d %s", resp.StatusCode, answer)
	}
	// The server loads every version before it listens: the refusal is
	// logged by now.
	if l := logs.String(); !strings.Contains(l, "refuse model version") || !strings.Contains(l, `unknown model type \"polynomial\": neither built in`) {
		t.Errorf("default server's log does not refuse the bundle naming its type:\n%s", l)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in
// different goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
