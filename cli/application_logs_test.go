package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
)

// TestApplicationLogs: `jobs stream-logs` passes on each replica's
// stdout and stderr prefixed by the replica while the job runs (the
// program waits for a go-ahead the test gives only once it saw the lines
// stream), and ends when the job ends with the chief's last line; the
// console's job page shows each replica's log, its markup escaped.
func TestApplicationLogs(t *testing.T) {
	st, _ := appStack(t)
	const id = "app_logs"
	goAhead := filepath.Join(t.TempDir(), "go")
	job := startUIStyle(t, st.Client, id, fmt.Sprintf(`{"job_id":%q,"application":{"name":"logs","args":[%q]},"cluster":{"scale_tier":"CUSTOM","worker_count":1}}`, id, goAhead))

	pr, pw := io.Pipe()
	var errb bytes.Buffer
	code := make(chan int, 1)
	go func() {
		c := run(withStackCreds([]string{"jobs", "stream-logs", id, "--temporal", st.Temporal.FrontendAddr()}), pw, &errb)
		pw.Close()
		code <- c
	}()
	defer pr.Close()
	sc := bufio.NewScanner(pr)
	var out strings.Builder
	// awaitLines reads the stream until it printed every line of want.
	awaitLines := func(want ...string) {
		t.Helper()
		left := map[string]bool{}
		for _, w := range want {
			left[w] = true
		}
		for len(left) > 0 && sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			delete(left, sc.Text())
		}
		if len(left) > 0 {
			t.Fatalf("stream-logs ended without %v:\n%s\nstderr: %s", left, out.String(), errb.String())
		}
	}
	awaitLines("chief-0| hello from chief-0", "worker-0| hello from worker-0",
		`chief-0| <script>alert('chief-0')</script>`, "worker-0| stderr of worker-0")
	desc, err := st.Client.DescribeWorkflowExecution(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := desc.WorkflowExecutionInfo.Status; s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the lines streamed with the job %s, want them while it runs", s)
	}
	if err := os.WriteFile(goAhead, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	awaitLines("chief-0| goodbye from chief-0")
	rest, _ := io.ReadAll(pr) // the stream ends when the job does
	out.Write(rest)
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("stream-logs exit %d: %s", c, errb.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("stream-logs did not end with the job")
	}
	if _, err := waitJob(t, job); err != nil {
		t.Fatalf("job: %v", err)
	}
	if !strings.Contains(out.String(), "job succeeded") {
		t.Errorf("stream-logs lacks the job's end:\n%s", out.String())
	}

	// The console's job page: each replica's log, escaped.
	status, page := get(t, "http://"+st.HTTPAddr, "/console/jobs/"+id)
	if status != 200 {
		t.Fatalf("console job page: %d\n%s", status, page)
	}
	for _, r := range []string{"chief-0", "worker-0"} {
		if !strings.Contains(page, `data-replica="`+r+`"`) || !strings.Contains(page, "hello from "+r) {
			t.Errorf("console job page lacks %s's log", r)
		}
	}
	if strings.Contains(page, "<script>alert(") || !strings.Contains(page, html.EscapeString("<script>alert(")) {
		t.Errorf("console job page does not show the replica's <script> line escaped")
	}
}
