package activities

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// reportClient is a Temporal client that records the reports the roles
// send their workflow: checkpoint_committed signals and
// register_parameter_server and register_replica updates (refused, which
// stops the role there), batch_progress signals. Any other call panics.
type reportClient struct {
	client.Client
	mu       sync.Mutex
	commits  []workflows.CheckpointCommitted
	regs     []workflows.PSRegistration
	replicas []workflows.ReplicaRegistration
	progress []workflows.BatchProgress
	job      string // the workflow ID the reports went to
}

var errStopHere = errors.New("test: registration recorded")

func (c *reportClient) SignalWorkflow(_ context.Context, id, _, name string, arg any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r := arg.(type) {
	case workflows.CheckpointCommitted:
		if name == workflows.CheckpointSignal {
			c.commits, c.job = append(c.commits, r), id
		}
	case workflows.BatchProgress:
		if name == workflows.BatchProgressSignal {
			c.progress, c.job = append(c.progress, r), id
		}
	}
	return nil
}

func (c *reportClient) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r := o.Args[0].(type) {
	case workflows.PSRegistration:
		if o.UpdateName == workflows.RegisterParameterServerUpdate {
			c.regs, c.job = append(c.regs, r), o.WorkflowID
		}
	case workflows.ReplicaRegistration:
		if o.UpdateName == workflows.RegisterReplicaUpdate {
			c.replicas, c.job = append(c.replicas, r), o.WorkflowID
		}
	}
	return nil, errStopHere
}

// reports returns how many reports c recorded.
func (c *reportClient) reports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.commits) + len(c.regs) + len(c.replicas) + len(c.progress)
}

// wantMismatch fails t unless err is a non-retryable ReportKeyMismatch.
func wantMismatch(t *testing.T, what string, err error) {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeReportKeyMismatch || !ae.NonRetryable() {
		t.Fatalf("%s: %v; want a non-retryable %s", what, err, workflows.ErrTypeReportKeyMismatch)
	}
}

// TestRolesRefuseAnotherReportKey runs the activities that sign with the
// run's report key (Train, TrainWorker, ParameterServer) with a public key
// in their input that is not the public half of the job directory's
// (a forged ReportKey completion): each fails for good with
// ReportKeyMismatch before it has signed or sent a report, committed a
// checkpoint or written a parameter server's secret. With the run's own
// key they work, and their reports verify under it.
func TestRolesRefuseAnotherReportKey(t *testing.T) {
	acts := newActs(t)
	acts.InProcess = true
	c := &reportClient{}
	acts.Client = c
	e := env(acts)
	s := spec("rk_roles")
	prep, pre := prepare(t, e, acts, s)
	v, err := e.ExecuteActivity(acts.ReportKey, workflows.ReportKeyInput{JobDir: prep.JobDir})
	if err != nil {
		t.Fatal(err)
	}
	var k workflows.ReportKeyResult
	v.Get(&k)
	pub := ed25519.PublicKey(k.PublicKey)
	forged, _, _ := ed25519.GenerateKey(nil)

	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	in.Train.MaxSteps, in.Train.SaveCheckpointsSteps = 20, 10
	cluster := jobspec.ClusterSpec{WorkerCount: 1, ParameterServerCount: 1}
	bad := in
	bad.ReportKey = forged
	for _, r := range []struct {
		name string
		act  any
		in   any
	}{
		{"Train", acts.Train, bad},
		{"TrainWorker (chief)", acts.TrainWorker, workflows.RoleInput{TrainInput: bad, Cluster: cluster, Task: 0}},
		{"TrainWorker", acts.TrainWorker, workflows.RoleInput{TrainInput: bad, Cluster: cluster, Task: 1}},
		{"ParameterServer", acts.ParameterServer, workflows.RoleInput{TrainInput: bad, Cluster: cluster, Task: 0}},
	} {
		_, err := e.ExecuteActivity(r.act, r.in)
		wantMismatch(t, r.name+" with a forged key", err)
		if strings.Contains(err.Error(), string(forged)) || strings.Contains(err.Error(), string(pub)) {
			t.Fatalf("%s: the error quotes a key", r.name)
		}
	}
	if n := c.reports(); n != 0 {
		t.Fatalf("%d reports sent with a forged key in the input, want none", n)
	}
	for _, p := range []string{jobdir.PSSecretFile(0), "checkpoints/checkpoint"} {
		if _, err := os.Stat(filepath.Join(prep.JobDir, filepath.FromSlash(p))); !os.IsNotExist(err) {
			t.Fatalf("%s after the roles were refused: %v; want none", p, err)
		}
	}

	// The run's own key: the parameter server signs its registration and
	// the trainer its commits with the key the workflow verifies.
	good := in
	good.ReportKey = pub
	if _, err := e.ExecuteActivity(acts.ParameterServer, workflows.RoleInput{TrainInput: good, Cluster: cluster, Task: 0}); err == nil || !strings.Contains(err.Error(), errStopHere.Error()) {
		t.Fatalf("ParameterServer with the run's key: %v; want it to register (%v)", err, errStopHere)
	}
	if _, err := e.ExecuteActivity(acts.Train, good); err != nil {
		t.Fatalf("Train with the run's key: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.regs) != 1 || !ed25519.Verify(pub, workflows.RegistrationReportBytes(c.job, c.regs[0]), c.regs[0].Signature) {
		t.Fatalf("registrations %+v, want one signed with the run's key", c.regs)
	}
	if len(c.commits) != 2 {
		t.Fatalf("%d checkpoint reports, want 2 (steps 10 and 20)", len(c.commits))
	}
	for _, cc := range c.commits {
		if !workflows.CommitReportVerified(pub, c.job, cc) {
			t.Fatalf("checkpoint report %+v does not verify under the run's key", cc)
		}
	}
}

// TestBatchPredictRefusesAnotherReportKey: BatchPredict given a public
// report key that is not the public half of its output directory's key
// (a forged BatchReportKey completion) fails for good with
// ReportKeyMismatch before its pipeline starts or it signals any
// progress; given the run's own key it goes on (here to the missing
// model; TestBatchPredictActivity runs it through with its key).
func TestBatchPredictRefusesAnotherReportKey(t *testing.T) {
	acts := newActs(t)
	c := &reportClient{}
	acts.Client = c
	e := env(acts)
	dir := t.TempDir()
	out := filepath.Join(dir, "predictions")
	ps := jobspec.PredictionSpec{JobID: "bp_rk", ModelDir: filepath.Join(dir, "model"), InputPaths: []string{filepath.Join(dir, "in.csv")}, OutputPath: out, DataFormat: jobspec.FormatCSV}.WithDefaults()
	in := workflows.BatchPredictInput{Spec: ps, FirstRunID: "bp-run"}
	v, err := e.ExecuteActivity(acts.BatchReportKey, in)
	if err != nil {
		t.Fatal(err)
	}
	var k workflows.ReportKeyResult
	v.Get(&k)
	forged, _, _ := ed25519.GenerateKey(nil)
	in.ReportKey = forged
	_, err = e.ExecuteActivity(acts.BatchPredict, in)
	wantMismatch(t, "BatchPredict with a forged key", err)
	ents, _ := os.ReadDir(out)
	for _, ent := range ents {
		if ent.Name() != jobdir.ClusterDir && ent.Name() != jobdir.ClaimFile {
			t.Errorf("%s in the output after a refused BatchPredict", ent.Name())
		}
	}
	if n := c.reports(); n != 0 {
		t.Fatalf("%d reports sent with a forged key, want none", n)
	}
	in.ReportKey = k.PublicKey
	_, err = e.ExecuteActivity(acts.BatchPredict, in)
	if err == nil || errType(err) == workflows.ErrTypeReportKeyMismatch || !strings.Contains(err.Error(), "model") {
		t.Fatalf("BatchPredict with the run's key: %v; want it past the key, failing on the missing model", err)
	}
}

// TestAppReplicaRefusesAnotherReportKey: an application's replica given
// a public report key that is not the public half of the job directory's
// fails for good with ReportKeyMismatch before it registers; given the
// run's own key it registers, signed with it.
func TestAppReplicaRefusesAnotherReportKey(t *testing.T) {
	ctx := context.Background()
	acts := newActs(t)
	c := &reportClient{}
	acts.Client = c
	reg, err := app.ParseRegistry([]byte(`{"applications": {"trainer": {"argv": ["/bin/true"]}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	acts.Applications = reg
	dir := filepath.Join(t.TempDir(), "app_rk")
	jd, err := acts.openJobDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jd.newReportKey(ctx, "run-1")
	jd.Close()
	if err != nil {
		t.Fatal(err)
	}
	forged, _, _ := ed25519.GenerateKey(nil)
	e := env(acts)
	in := workflows.ReplicaInput{JobID: "app_rk", JobDir: dir, Application: jobspec.ApplicationSpec{Name: "trainer"},
		Cluster: jobspec.ClusterSpec{ScaleTier: jobspec.TierBasic}, Type: workflows.ReplicaChief, Gen: 1, ReportKey: forged}
	_, err = e.ExecuteActivity(acts.AppReplica, in)
	wantMismatch(t, "AppReplica with a forged key", err)
	if n := c.reports(); n != 0 {
		t.Fatalf("%d reports sent with a forged key, want none", n)
	}
	in.ReportKey = pub
	if _, err := e.ExecuteActivity(acts.AppReplica, in); err == nil || !strings.Contains(err.Error(), errStopHere.Error()) {
		t.Fatalf("AppReplica with the run's key: %v; want it to register (%v)", err, errStopHere)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.replicas) != 1 || !ed25519.Verify(pub, workflows.ReplicaReportBytes(c.job, c.replicas[0]), c.replicas[0].Signature) {
		t.Fatalf("registrations %+v, want one signed with the run's key", c.replicas)
	}
}
