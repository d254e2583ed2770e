package activities

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// startClient is a Temporal client whose only history is the start of
// one run: workflowType started with spec, as the server would tell
// Publish (publishBlessRule). Any other call panics.
type startClient struct {
	client.Client
	workflowType string
	spec         jobspec.JobSpec
}

func (c startClient) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	in, err := converter.GetDefaultDataConverter().ToPayloads(c.spec)
	if err != nil {
		panic(err)
	}
	ev := &historypb.HistoryEvent{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
			WorkflowType: &commonpb.WorkflowType{Name: c.workflowType}, Input: in}}}
	return &oneEvent{ev: ev}
}

type oneEvent struct {
	ev   *historypb.HistoryEvent
	done bool
}

func (o *oneEvent) HasNext() bool { return !o.done }
func (o *oneEvent) Next() (*historypb.HistoryEvent, error) {
	o.done = true
	return o.ev, nil
}

// commitPointer makes the job directory dir look trained to step: its
// checkpoint pointer names ckpt-<step> (what Publish's checkTrained reads).
func commitPointer(t *testing.T, dir string, step int64) {
	t.Helper()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Write(context.Background(), jobdir.CheckpointsDir+"/"+train.PointerFile, []byte(train.CheckpointName(step)+"\n")); err != nil {
		t.Fatal(err)
	}
}

// blessedSpec is census_b's spec as its run started: a bless section with
// one accuracy threshold (min), promote "if_blessed".
func blessedSpec(min float64) jobspec.JobSpec {
	s := spec("census_b")
	s.ModelName, s.Promote = "census", jobspec.PromoteIfBlessed
	b := jobspec.BlessSpec{Thresholds: []jobspec.Threshold{{Metric: "accuracy", Min: &min}}}.WithDefaults(false)
	s.Bless = &b
	return s
}

// TestPublishRequiresTheStoredBlessing is issue #49's forged Bless: with a
// bless section in the job's spec (as the server recorded the run's
// start), Publish refuses a candidate that carries no record of its own
// Bless step, whatever the workflow's copy says (a forged
// {"blessed": true}, with or without a record); a record of another
// candidate, model or job does not count; a record that did not bless it
// cannot make it the default under "if_blessed"; and the real flow (Bless,
// then Publish) publishes it as the default and stores the record Bless
// wrote, not the workflow's copy.
func TestPublishRequiresTheStoredBlessing(t *testing.T) {
	ctx := context.Background()
	acts := newActs(t)
	dir := prepareAs(t, acts, "census_b", "run-b", "")
	cand := realBundle(t, dir)
	owner := &workflows.JobOwner{JobID: "census_b", FirstRunID: "run-b"}
	acts.Client = startClient{workflowType: workflows.TrainingJobName, spec: blessedSpec(0)}
	e := env(acts)
	b, err := bundle.ReadDir(cand, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.Open(ctx, cand)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// Train completed early (forged): nothing is published before the
	// job has committed its last step.
	_, err = e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: "census_b", Bundle: cand, Model: "census", Owner: owner})
	t.Logf("training not finished: %v", err)
	if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "job census_b has committed step 0 of its 100: training has not finished: refusing to publish") {
		t.Fatalf("Publish before training finished = %v, want a refusal", err)
	}
	commitPointer(t, dir, 100)

	forgedCopy, _ := json.Marshal(bundle.Blessing{FormatVersion: bundle.BlessingFormat, Model: "census", CandidateID: b.ID(), Blessed: true, JobID: "census_b"})
	pub := workflows.PublishInput{JobID: "census_b", Bundle: cand, Model: "census", Owner: owner, Promote: true}
	for _, c := range []struct {
		name     string
		blessing json.RawMessage
	}{{"forged verdict, no record", nil}, {"forged verdict and record", forgedCopy}} {
		in := pub
		in.Blessing = c.blessing
		_, err := e.ExecuteActivity(acts.Publish, in)
		t.Logf("%s: %v", c.name, err)
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "no blessing record for candidate "+cand) ||
			!strings.Contains(err.Error(), "refusing to publish with bless required") {
			t.Fatalf("%s: Publish = %v, want the refusal for no blessing record", c.name, err)
		}
	}

	// Records stored with the candidate that are not its blessing.
	for _, c := range []struct {
		name string
		edit func(*bundle.Blessing)
		want string
	}{
		{"another candidate", func(bl *bundle.Blessing) { bl.CandidateID = strings.Repeat("0", 64) }, "judged bundle"},
		{"another model", func(bl *bundle.Blessing) { bl.Model = "other" }, `model "other"`},
		{"another job", func(bl *bundle.Blessing) { bl.JobID = "thief_1" }, `job "thief_1"`},
	} {
		bl := bundle.Blessing{Model: "census", CandidateID: b.ID(), Blessed: true, JobID: "census_b"}
		c.edit(&bl)
		if err := bundle.WriteCandidateBlessing(ctx, st, &bl); err != nil {
			t.Fatal(err)
		}
		_, err := e.ExecuteActivity(acts.Publish, pub)
		t.Logf("%s: %v", c.name, err)
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "no blessing record for candidate") || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("record of %s: Publish = %v, want a refusal naming %s", c.name, err, c.want)
		}
	}
	if vs, _ := acts.Models.Versions(ctx, "census"); len(vs) != 0 {
		t.Fatalf("the refused publishes left versions %v", vs)
	}

	// The real Bless refuses it (accuracy ≥ 0.99): a forged "blessed"
	// cannot promote it.
	bin := workflows.BlessInput{JobID: "census_b", Model: "census", Bundle: cand, Eval: []string{filepath.Join(dir, "raw", "eval.csv")}, Spec: *blessedSpec(0.99).Bless, Owner: owner}
	if v, err := e.ExecuteActivity(acts.Bless, bin); err != nil {
		t.Fatal(err)
	} else {
		var res workflows.BlessResult
		v.Get(&res)
		if res.Blessed {
			t.Fatalf("bless at accuracy ≥ 0.99: %+v", res)
		}
	}
	_, err = e.ExecuteActivity(acts.Publish, pub)
	t.Logf("not blessed, promote: %v", err)
	if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "is not blessed") {
		t.Fatalf("Publish of a refused candidate as the default = %v, want a refusal", err)
	}

	// The legit flow: Bless blesses it, Publish makes it the default and
	// stores Bless's own record.
	bin.Spec = *blessedSpec(0).Bless
	v, err := e.ExecuteActivity(acts.Bless, bin)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.BlessResult
	v.Get(&res)
	if !res.Blessed {
		t.Fatalf("bless at accuracy ≥ 0: %+v", res)
	}
	in := pub
	in.Blessing = forgedCopy // the workflow's copy is not what is stored
	v, err = e.ExecuteActivity(acts.Publish, in)
	if err != nil {
		t.Fatal(err)
	}
	var out workflows.PublishResult
	v.Get(&out)
	if out.Version != 1 || !out.Default {
		t.Fatalf("publish %+v", out)
	}
	stored, err := acts.Models.(bundle.Blessings).Blessing(ctx, "census", 1)
	if err != nil || !stored.Blessed || stored.CandidateID != b.ID() || stored.EvalRows == 0 || len(stored.Metrics) == 0 {
		t.Fatalf("stored blessing %+v, %v: want Bless's record (its rows and metrics)", stored, err)
	}
}

// TestPublishWithoutBlessSection: a job whose spec has no bless section
// (and an application's job, which has no Bless step) publishes as before,
// with no record.
func TestPublishWithoutBlessSection(t *testing.T) {
	for _, c := range []struct {
		name string
		spec jobspec.JobSpec
	}{
		{"no bless section", spec("census_b")},
		{"an application's job", func() jobspec.JobSpec {
			s := blessedSpec(0)
			s.Promote = jobspec.PromoteNever
			s.Application = &jobspec.ApplicationSpec{Name: "trainer"}
			return s
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			acts := newActs(t)
			dir := prepareAs(t, acts, "census_b", "run-b", "")
			cand := realBundle(t, dir)
			commitPointer(t, dir, 100)
			acts.Client = startClient{workflowType: workflows.TrainingJobName, spec: c.spec}
			pub := workflows.PublishInput{JobID: "census_b", Bundle: cand, Model: "census", Owner: &workflows.JobOwner{JobID: "census_b", FirstRunID: "run-b"}}
			if _, err := env(acts).ExecuteActivity(acts.Publish, pub); err != nil {
				t.Fatal(err)
			}
		})
	}
}
