package devserver

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestWorkerTokens checks the server's authorization: a caller without
// a token gets health and nothing else; a user (a user token) can start
// and read workflows but can neither poll a task queue nor complete an
// activity by its ID, nor call operator APIs; a worker with the token
// runs workflows; the history names who did what (the user started, the
// worker completed), whatever identity the callers typed; a schedule
// fires (the system worker reaches the internal frontend); and the
// services' own ports refuse a plain connection.
func TestWorkerTokens(t *testing.T) {
	const token, userToken = "worker-secret-0123456789", "user-secret-0123456789"
	s := startServer(t, Options{Home: t.TempDir(), FrontendAddr: "127.0.0.1:0", Logger: testLogger(t), WorkerTokens: []string{token},
		UserTokens: map[string]string{userToken: "alice"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	withToken := func(tok, identity string) client.Client {
		c, err := client.Dial(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace(), Logger: nopSDKLogger{}, Identity: identity,
			Credentials: client.NewAPIKeyStaticCredentials(tok), ConnectionOptions: client.ConnectionOptions{TLSDisabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	user, wc := withToken(userToken, "typed-by-alice"), withToken(token, "typed-by-worker")

	// Anonymous callers: health only.
	anon, err := client.NewLazyClient(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace(), Logger: nopSDKLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		t.Errorf("health without a token: %v, want served", err)
	}
	for name, call := range map[string]func() error{
		"ListWorkflowExecutions": func() error {
			_, err := anon.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.Namespace()})
			return err
		},
		"StartWorkflowExecution": func() error {
			_, err := anon.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "anon", TaskQueue: "tq-auth"}, "Echo", "x")
			return err
		},
		"DescribeNamespace": func() error {
			_, err := anon.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.Namespace()})
			return err
		},
	} {
		var pd *serviceerror.PermissionDenied
		if err := call(); !errors.As(err, &pd) || !strings.Contains(pd.Reason, "unauthenticated") {
			t.Errorf("%s without a token: %v, want PermissionDenied saying unauthenticated", name, err)
		}
	}
	if c, err := withTokenErr(s, "not-a-known-token-0123456789"); err != nil {
		t.Errorf("dial with an unknown token: %v (the SDK's dial asks GetSystemInfo, a health API)", err)
	} else {
		_, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.Namespace()})
		var pd *serviceerror.PermissionDenied
		if !errors.As(err, &pd) || !strings.Contains(pd.Reason, "unauthenticated") {
			t.Errorf("list with an unknown token: %v, want PermissionDenied saying unauthenticated", err)
		}
		c.Close()
	}

	denied := func(what string, err error) {
		t.Helper()
		var pd *serviceerror.PermissionDenied
		if !errors.As(err, &pd) || !strings.Contains(pd.Reason, "worker") {
			t.Errorf("%s without the worker token: %v, want PermissionDenied naming the worker token", what, err)
		}
	}
	// A user starts a workflow and reads it.
	run, err := user.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "echo-auth", TaskQueue: "tq-auth"}, "Echo", "hello")
	if err != nil {
		t.Fatalf("a user's start: %v", err)
	}
	if _, err := user.DescribeWorkflowExecution(ctx, run.GetID(), ""); err != nil {
		t.Fatalf("a user's describe: %v", err)
	}
	// …but cannot act as a worker.
	_, err = user.WorkflowService().PollWorkflowTaskQueue(ctx, &workflowservice.PollWorkflowTaskQueueRequest{
		Namespace: s.Namespace(), TaskQueue: &taskqueuepb.TaskQueue{Name: "tq-auth"}, Identity: "attacker"})
	denied("PollWorkflowTaskQueue", err)
	_, err = user.WorkflowService().PollActivityTaskQueue(ctx, &workflowservice.PollActivityTaskQueueRequest{
		Namespace: s.Namespace(), TaskQueue: &taskqueuepb.TaskQueue{Name: "tq-auth"}, Identity: "attacker"})
	denied("PollActivityTaskQueue", err)
	denied("CompleteActivityByID", user.CompleteActivityByID(ctx, s.Namespace(), run.GetID(), "", "1", "forged", nil))
	denied("RecordActivityHeartbeatByID", user.RecordActivityHeartbeatByID(ctx, s.Namespace(), run.GetID(), "", "1", "beat"))
	_, err = user.OperatorService().DeleteNamespace(ctx, nil)
	var pd *serviceerror.PermissionDenied
	if !errors.As(err, &pd) {
		t.Errorf("DeleteNamespace without the worker token: %v, want PermissionDenied", err)
	}
	// A worker with the token runs it.
	w := worker.New(wc, "tq-auth", worker.Options{})
	w.RegisterWorkflowWithOptions(echoWorkflow, workflow.RegisterOptions{Name: "Echo"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got string
	if err := run.Get(ctx, &got); err != nil || got != "hello" {
		t.Fatalf("workflow on the token's worker: %q, %v", got, err)
	}
	// The history names the principals, not the typed identities.
	principals := map[string]string{}
	it := user.GetWorkflowHistory(ctx, run.GetID(), "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if p := ev.GetPrincipal(); p != nil {
			principals[ev.GetEventType().String()] = p.GetType() + ":" + p.GetName()
		}
	}
	if got, want := principals["WorkflowExecutionStarted"], PrincipalUser+":alice"; got != want {
		t.Errorf("principal of the start event = %q, want %q (all: %v)", got, want, principals)
	}
	if got, want := principals["WorkflowTaskCompleted"], PrincipalWorker+":"+WorkerSubject; got != want {
		t.Errorf("principal of a workflow task's completion = %q, want %q (all: %v)", got, want, principals)
	}
	// A schedule fires: the system worker reaches the internal frontend.
	h, err := user.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: "sched-auth", Spec: client.ScheduleSpec{},
		Action: &client.ScheduleWorkflowAction{ID: "echo-sched", Workflow: "Echo", Args: []any{"scheduled"}, TaskQueue: "tq-auth"}})
	if err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		t.Fatalf("trigger schedule: %v", err)
	}
	for {
		d, err := h.Describe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Info.RecentActions) > 0 {
			id := d.Info.RecentActions[0].StartWorkflowResult.WorkflowID
			if err := user.GetWorkflow(ctx, id, "").Get(ctx, &got); err != nil || got != "scheduled" {
				t.Fatalf("scheduled workflow %s: %q, %v", id, got, err)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the schedule's workflow did not start")
		case <-time.After(100 * time.Millisecond): // polling the server's state
		}
	}
	// The services' own ports take only this run's certificate.
	for name, port := range map[string]int{"history": s.ports.historyGRPC, "matching": s.ports.matchingGRPC, "internal frontend": s.ports.internalGRPC} {
		addr := net.JoinHostPort(loopback, strconv.Itoa(port))
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		hc := workflowservice.NewWorkflowServiceClient(conn)
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = hc.GetSystemInfo(cctx, &workflowservice.GetSystemInfoRequest{})
		ccancel()
		conn.Close()
		if err == nil {
			t.Errorf("%s port %d answered a plain connection", name, port)
		}
		tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			// The handshake completes on the client's side first; the server
			// refuses the missing certificate on the first read.
			_, err = tc.Read(make([]byte, 1))
			tc.Close()
		}
		if err == nil {
			t.Errorf("%s port %d took a TLS connection without a client certificate", name, port)
		}
	}
}

// withTokenErr dials s presenting tok.
func withTokenErr(s *Server, tok string) (client.Client, error) {
	return client.Dial(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace(), Logger: nopSDKLogger{},
		Credentials: client.NewAPIKeyStaticCredentials(tok), ConnectionOptions: client.ConnectionOptions{TLSDisabled: true}})
}

// TestUserTokensOptions checks that Start refuses user tokens it cannot
// enforce or tell apart, naming the field.
func TestUserTokensOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Home: "h", UserTokens: map[string]string{"user-secret-0123456789": "a"}}, "without WorkerTokens"},
		{Options{Home: "h", WorkerTokens: []string{"w"}, UserTokens: map[string]string{"short": "a"}}, "shorter than"},
		{Options{Home: "h", WorkerTokens: []string{"w"}, UserTokens: map[string]string{"user-secret-0123456789": WorkerSubject}}, "user name"},
		{Options{Home: "h", WorkerTokens: []string{"w"}, UserTokens: map[string]string{"user-secret-0123456789": "a\x1b[31m"}}, "user name"},
		{Options{Home: "h", WorkerTokens: []string{"user-secret-0123456789"}, UserTokens: map[string]string{"user-secret-0123456789": "a"}}, "also a worker token"},
	} {
		if _, err := c.o.withDefaults(); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "options: UserTokens") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("withDefaults(%v): %v, want an error naming UserTokens and %q", c.o.UserTokens, err, c.want)
		}
	}
}

// TestUIWithAuthorization checks that the Web UI keeps working when
// anonymous callers get nothing: its server presents a token of its own,
// made for this run, and the history names it as the UI's user.
func TestUIWithAuthorization(t *testing.T) {
	const token = "worker-secret-0123456789"
	s := startServer(t, Options{Home: t.TempDir(), FrontendAddr: "127.0.0.1:0", UIAddr: "127.0.0.1:0", Logger: testLogger(t), WorkerTokens: []string{token}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.UIURL()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/api/v1/namespaces/" + s.Namespace()); code != http.StatusOK || !strings.Contains(body, `"name": "`+s.Namespace()+`"`) {
		t.Errorf("the UI's describe namespace: %d %.300s, want 200 naming %s", code, body, s.Namespace())
	}
	wc, err := withTokenErr(s, token)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	if _, err := wc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "ui-sees", TaskQueue: "tq-ui"}, "Echo", "x"); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/api/v1/namespaces/" + s.Namespace() + "/workflows/ui-sees"); code != http.StatusOK || !strings.Contains(body, "ui-sees") {
		t.Errorf("the UI's describe workflow: %d %.300s, want 200", code, body)
	}
	// A browser's own token is used instead of the UI's: an unknown one is
	// refused.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.UIURL()+"/api/v1/namespaces/"+s.Namespace()+"/workflows/ui-sees", nil)
	req.Header.Set("Authorization", "Bearer not-a-known-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("the UI with a browser's unknown token: %s, want 403 Forbidden", resp.Status)
	}
}
