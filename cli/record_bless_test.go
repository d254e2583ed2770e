package cli

import (
	"context"
	"testing"

	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// recordBless records, unless already recorded, a job with a bless
// section whose candidate is judged against an earlier version of its
// model and published beside it ("blessed"): the Bless activity after the
// bless-step version marker (workflows.blessChange), then Publish.
func recordBless(t *testing.T, st *stack) {
	if !todo("blessed") {
		return
	}
	ctx := context.Background()
	base := jobspec.JobSpec{JobID: "blessed_base", ModelName: "bless_hist", Data: jobspec.DataSpec{GeneratedRows: 2000}, Train: jobspec.TrainSpec{MaxSteps: 300}}
	run, err := jobs.Start(ctx, st.Client, base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, run); err != nil {
		t.Fatal(err)
	}
	max := 0.01
	cand := base
	cand.JobID, cand.Train.MaxSteps, cand.Promote = "blessed", 20, jobspec.PromoteIfBlessed
	cand.Bless = &jobspec.BlessSpec{Slices: []string{"gender"}, MaxSliceRegression: &max, Infra: &jobspec.InfraSpec{}}
	run, err = jobs.Start(ctx, st.Client, cand)
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	if res.Blessing == nil || res.Version != 2 {
		t.Fatalf("blessed job: %+v", res)
	}
	saveHistory(t, st, "blessed", "", "blessed", versionProof("bless-step"), activityProof(workflows.BlessActivity), activityProof(workflows.PublishActivity))
}
