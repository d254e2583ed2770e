package jobs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/workflows"
)

// TestCancelTellsAnEndedJob (issue #43): cancelling a job that has
// already ended requests nothing and says how it ended (ErrEnded), not
// "cancel requested"; a running job's cancel is requested; an unknown
// job is not found.
func TestCancelTellsAnEndedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal dev server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devserver.Start(ctx, devserver.Options{Home: t.TempDir(), FrontendAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cl, err := client.Dial(client.Options{HostPort: srv.FrontendAddr(), Namespace: srv.Namespace(), Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := func(id string) {
		// No worker polls the queue: the job stays RUNNING until ended.
		if _, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "no_worker"}, workflows.TrainingJobName, map[string]any{"job_id": id}); err != nil {
			t.Fatal(err)
		}
	}
	start("ended_1")
	if err := cl.TerminateWorkflow(ctx, "ended_1", "", "test"); err != nil {
		t.Fatal(err)
	}
	c, err := Cancel(ctx, cl, srv.Namespace(), "ended_1")
	if !errors.Is(err, ErrEnded) || c.Requested || c.Status != "TERMINATED" || c.End == nil || !strings.Contains(err.Error(), "job ended_1 was not cancelled: it ended TERMINATED at ") {
		t.Errorf("cancel of a terminated job: %+v, %v; want ErrEnded, not requested, status TERMINATED", c, err)
	}

	start("running_1")
	c, err = Cancel(ctx, cl, srv.Namespace(), "running_1")
	if err != nil || !c.Requested || c.Status != "RUNNING" || c.RunID == "" {
		t.Errorf("cancel of a running job: %+v, %v; want requested", c, err)
	}

	if _, err := Cancel(ctx, cl, srv.Namespace(), "nobody_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel of an unknown job: %v, want ErrNotFound", err)
	}
}
