package activities

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// realBundle copies bundle's census fixture into dir/export/final/300: a
// complete, verified bundle of a linear census classifier.
func realBundle(t *testing.T, dir string) string {
	t.Helper()
	b := filepath.Join(dir, jobdir.ExportDir, "final", "300")
	if err := os.CopyFS(b, os.DirFS("../bundle/testdata/v1/bundle")); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBlessActivity: Bless judges its own job's export on the job's
// evaluation rows (no baseline for a new model), refuses another job's
// export and evaluation data outside the worker's roots; Publish stores
// the record with the version, and refuses, before publishing anything,
// a record of another bundle.
func TestBlessActivity(t *testing.T) {
	acts := newActs(t)
	dir := prepareAs(t, acts, "census_b", "run-b", "")
	cand := realBundle(t, dir)
	owner := &workflows.JobOwner{JobID: "census_b", FirstRunID: "run-b"}
	e := env(acts)
	evalFile := filepath.Join(dir, "raw", "eval.csv")
	max := 0.01
	spec := jobspec.BlessSpec{Thresholds: []jobspec.Threshold{{Metric: "accuracy", Min: new(float64)}}, Slices: []string{"gender"}, MaxSliceRegression: &max,
		Infra: &jobspec.InfraSpec{}}.WithDefaults(false)
	in := workflows.BlessInput{JobID: "census_b", Model: "census", Bundle: cand, Eval: []string{evalFile}, Spec: spec, Owner: owner}
	v, err := e.ExecuteActivity(acts.Bless, in)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.BlessResult
	v.Get(&res)
	bl, err := bundle.ParseBlessing(res.Record)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Blessed || !res.NoBaseline || bl.EvalRows == 0 || len(bl.Slices) != 2 || bl.Infra == nil || !bl.Infra.Pass || bl.JobID != "census_b" {
		t.Fatalf("bless %+v, record %s", res, res.Record)
	}

	bad := in
	bad.Spec.EvalData = []string{"/etc/passwd"}
	if _, err := e.ExecuteActivity(acts.Bless, bad); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "bless.eval_data[0]") {
		t.Errorf("eval data outside the roots: %v", err)
	}
	asJob(acts, "thief_1")
	thief := in
	thief.Owner = &workflows.JobOwner{JobID: "thief_1", FirstRunID: "run-t"}
	if _, err := env(acts).ExecuteActivity(acts.Bless, thief); errType(err) != workflows.ErrTypeNotOwner {
		t.Errorf("Bless of another job's export: %v, want NotOwner", err)
	}
	asJob(acts, "census_b")

	ctx := context.Background()
	forged := *bl
	forged.CandidateID = strings.Repeat("0", 64)
	rec, _ := json.Marshal(forged)
	pub := workflows.PublishInput{JobID: "census_b", Bundle: cand, Model: "census", Owner: owner, Blessing: rec}
	if _, err := e.ExecuteActivity(acts.Publish, pub); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "not the one published") {
		t.Fatalf("a record of another bundle: %v", err)
	}
	if vs, _ := acts.Models.Versions(ctx, "census"); len(vs) != 0 {
		t.Fatalf("the refused publish left versions %v", vs)
	}
	pub.Blessing = res.Record
	if _, err := e.ExecuteActivity(acts.Publish, pub); err != nil {
		t.Fatal(err)
	}
	stored, err := acts.Models.(bundle.Blessings).Blessing(ctx, "census", 1)
	if err != nil || !stored.Blessed || stored.Version != 1 || stored.CandidateID != bl.CandidateID {
		t.Fatalf("stored blessing %+v, %v", stored, err)
	}
}
