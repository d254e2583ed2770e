package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/trainflow/trainflow/workflows"
)

// historiesDir holds histories of real runs that workflows' replay test
// replays against the current workflow code.
const historiesDir = "../../workflows/testdata/histories"

// TestRecordHistories re-records workflows/testdata/histories from real
// runs on the embedded server with real worker processes. Run it on purpose
// after a deliberate workflow change (guarded by workflow.GetVersion for
// jobs already running):
//
//	TRAINFLOW_RECORD_HISTORIES=1 go test -run TestRecordHistories -v ./cmd/trainflow
//
// It takes about two minutes: the killed worker's activity is retried only
// after its one-minute heartbeat timeout.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("TRAINFLOW_RECORD_HISTORIES") == "" {
		t.Skip("records histories only when TRAINFLOW_RECORD_HISTORIES=1 (see the doc comment)")
	}
	home := t.TempDir()
	exe, _ := os.Executable()
	st, err := startStack(context.Background(), stackConfig{Home: home, FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NoWorker: true,
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
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
	ctx := context.Background()
	save := func(id string) {
		h, err := fetchHistory(ctx, st.Client, id, "")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
		if err := os.WriteFile(filepath.Join(historiesDir, id+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %s: %d events", id, len(h.Events))
	}
	// waitStarted blocks until activity has an attempt running.
	waitStarted := func(id, activity string) {
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			d, err := st.Client.DescribeWorkflowExecution(ctx, id, "")
			if err == nil {
				for _, pa := range d.PendingActivities {
					if pa.ActivityType.GetName() == activity && pa.State == enumspb.PENDING_ACTIVITY_STATE_STARTED {
						return
					}
				}
			}
			time.Sleep(200 * time.Millisecond) // polling a remote state, not synchronising goroutines
		}
		t.Fatalf("%s of %s never started", activity, id)
	}

	ok, err := startJob(ctx, st.Client, workflows.JobSpec{JobID: "succeeded", Data: workflows.DataSpec{GeneratedRows: 2000}, Train: workflows.TrainSpec{MaxSteps: 300, SaveCheckpointsSteps: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, ok); err != nil {
		t.Fatal(err)
	}
	save("succeeded")

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("39, State-gov, oops\n"), 0o644)
	run, _ := startJob(ctx, st.Client, workflows.JobSpec{JobID: "bad_data", Data: workflows.DataSpec{Train: []string{bad}, Eval: []string{bad}}})
	if _, err := waitJob(t, run); err == nil {
		t.Fatal("bad_data succeeded")
	}
	save("bad_data")

	run, _ = startJob(ctx, st.Client, workflows.JobSpec{JobID: "cancelled", Data: workflows.DataSpec{GeneratedRows: 1_000_000}})
	waitStarted("cancelled", workflows.PreprocessActivity)
	st.Client.CancelWorkflow(ctx, "cancelled", "")
	if _, err := waitJob(t, run); !temporal.IsCanceledError(err) {
		t.Fatalf("cancelled job: %v", err)
	}
	save("cancelled")

	run, _ = startJob(ctx, st.Client, workflows.JobSpec{JobID: "worker_killed", Data: workflows.DataSpec{GeneratedRows: 1_000_000}})
	waitStarted("worker_killed", workflows.PreprocessActivity)
	kill(w)
	w = startWorker()
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	save("worker_killed")
}
