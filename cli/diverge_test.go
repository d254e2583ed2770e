package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestDivergedJobFailsFast runs census jobs whose SGD learning rate makes
// the weights overflow, locally and on a parameter-server cluster, through
// the real workflow: each fails with the non-retryable NonFiniteLoss, no
// training activity is retried, and every checkpoint committed is finite.
func TestDivergedJobFailsFast(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home)
	for _, c := range []struct{ id, cluster string }{
		{"diverge_basic", `{"scale_tier":"BASIC"}`},
		{"diverge_cluster", `{"scale_tier":"CUSTOM","worker_count":2,"parameter_server_count":1,"heartbeat_timeout_secs":4}`},
	} {
		t.Run(c.id, func(t *testing.T) {
			input := strings.Replace(jobInput(c.id, `{"generated_rows":2000}`, c.cluster, 2000, 5),
				`"preset":"census",`, `"preset":"census","model":{"optimizer":"sgd","learning_rate":1e308},`, 1)
			_, err := waitJob(t, startUIStyle(t, st.Client, c.id, input))
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeNonFiniteLoss || !strings.Contains(err.Error(), "diverged") {
				t.Fatalf("job error %v, want NonFiniteLoss saying training diverged", err)
			}
			t.Logf("job error: %v", err)
			hist := st.Client.GetWorkflowHistory(context.Background(), c.id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for hist.HasNext() {
				ev, err := hist.Next()
				if err != nil {
					t.Fatal(err)
				}
				if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.Attempt > 1 {
					t.Fatalf("an activity was retried (attempt %d) after the model diverged", a.Attempt)
				}
			}
			ckdir := filepath.Join(home, "jobs", c.id, "checkpoints")
			steps, err := train.ListCheckpoints(ckdir)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			for _, s := range steps {
				ck, err := train.ReadCheckpoint(filepath.Join(ckdir, train.CheckpointName(s)))
				if err != nil || ck.CheckFinite() != nil {
					t.Fatalf("committed checkpoint %d: %v, %v", s, err, ck.CheckFinite())
				}
			}
			t.Logf("finite checkpoints committed before the divergence: %v", steps)
			if strings.Contains(c.cluster, "CUSTOM") {
				checkSecretsNotInHistory(t, st.Client, c.id, filepath.Join(home, "jobs", c.id))
			}
		})
	}
}

// checkSecretsNotInHistory fails t if a parameter server's secret, read
// from the job directory jobDir, appears anywhere in job id's history.
func checkSecretsNotInHistory(t *testing.T, c client.Client, id, jobDir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(jobDir, "cluster", "ps-*.secret"))
	if len(files) == 0 {
		t.Fatalf("no parameter-server secret in %s/cluster", jobDir)
	}
	var hist bytes.Buffer
	it := c.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(ev) // payloads verbatim
		if err != nil {
			t.Fatal(err)
		}
		hist.Write(b)
	}
	for _, f := range files {
		secret, err := os.ReadFile(f)
		if err != nil || len(secret) < 32 {
			t.Fatalf("secret %s: %q, %v", f, secret, err)
		}
		if bytes.Contains(hist.Bytes(), secret) {
			t.Fatalf("the secret of %s is in the workflow history", f)
		}
	}
}
