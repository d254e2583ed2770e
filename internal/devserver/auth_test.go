package devserver

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
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
// the worker token can start and read workflows but can neither poll a
// task queue nor complete an activity by its ID, nor call operator APIs;
// a worker with the token runs workflows; a schedule fires (the system
// worker reaches the internal frontend); and the services' own ports
// refuse a plain connection.
func TestWorkerTokens(t *testing.T) {
	const token = "worker-secret-0123456789"
	s := startServer(t, Options{Home: t.TempDir(), FrontendAddr: "127.0.0.1:0", Logger: testLogger(t), WorkerTokens: []string{token}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user := dial(t, s)
	wc, err := client.Dial(client.Options{HostPort: s.FrontendAddr(), Namespace: s.Namespace(), Logger: nopSDKLogger{},
		Credentials: client.NewAPIKeyStaticCredentials(token), ConnectionOptions: client.ConnectionOptions{TLSDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()

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
