package activities

import (
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// TestPrepareApplication: PrepareJob refuses an application the worker did
// not register, one registered for a sandbox on a worker without one, and
// a job dir in object storage (the program is given local paths), each as
// InvalidSpec naming the field, before claiming anything; a registered
// application's job generates no data.
func TestPrepareApplication(t *testing.T) {
	acts := newActs(t)
	reg, err := app.ParseRegistry([]byte(`{"applications":{"ok":{"argv":["/bin/true"]},"boxed":{"argv":["/bin/true"],"sandbox":true}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	acts.Applications = reg
	e := env(acts)
	for _, tc := range []struct {
		spec  jobspec.JobSpec
		field string
	}{
		{jobspec.JobSpec{JobID: "a1", Application: &jobspec.ApplicationSpec{Name: "nope"}}, `application.name "nope" is not registered on this worker (registered: boxed, ok)`},
		{jobspec.JobSpec{JobID: "a2", Application: &jobspec.ApplicationSpec{Name: "boxed"}}, `application.name "boxed": registered to run in a sandbox`},
	} {
		_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: tc.spec.WithDefaults(), FirstRunID: "r"})
		if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want InvalidSpec with %q", tc.spec.Application.Name, err, tc.field)
		}
	}
	acts.Jobs = "mem://jobs"
	_, err = e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: jobspec.JobSpec{JobID: "a3", Application: &jobspec.ApplicationSpec{Name: "ok"}}.WithDefaults(), FirstRunID: "r"})
	if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "job_dir") {
		t.Errorf("object storage job dir: %v, want InvalidSpec naming job_dir", err)
	}
	acts.Jobs = ""
	v, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: jobspec.JobSpec{JobID: "a4", Application: &jobspec.ApplicationSpec{Name: "ok"}}.WithDefaults(), FirstRunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var prep workflows.PrepareResult
	v.Get(&prep)
	if len(prep.Train) != 0 || prep.JobDir == "" {
		t.Errorf("prepared %+v: an application job has no data of trainflow's", prep)
	}
}
