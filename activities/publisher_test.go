package activities

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// TestPrepareRefusesATakeoverItCouldNeverPublish: a job whose version is
// to take traffic (promote true or "if_blessed", or a rollout) in a model
// another job owns, which the operator's rule does not let it promote, is
// refused by PrepareJob (ModelOwned, not retried, naming the model, its
// owner and the flag) before a directory is claimed, instead of by
// Publish after it trained. Adding a version without promote, the owner's
// own job, a job the rule names, a model nobody owns and one whose
// directory cannot be read (Publish reports that) go through.
func TestPrepareRefusesATakeoverItCouldNeverPublish(t *testing.T) {
	acts := newActs(t)
	e := env(acts)
	owned := filepath.Join(acts.Home, "models", "census")
	if err := os.MkdirAll(owned, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(owned, bundle.OwnerFile), []byte(`{"job_id":"census_1","first_run_id":"r1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(acts.Home, "models", "blocked"), []byte("a file where the model's directory goes"), 0o644); err != nil {
		t.Fatal(err)
	}
	mk := func(id, model string, promote jobspec.Promote, rollout bool) jobspec.JobSpec {
		s := spec(id)
		s.ModelName, s.Promote = model, promote
		if promote == jobspec.PromoteIfBlessed {
			s.Bless = &jobspec.BlessSpec{}
		}
		if rollout {
			s.Rollout = &jobspec.RolloutSpec{}
		}
		return s
	}
	for _, c := range []struct {
		name    string
		s       jobspec.JobSpec
		rules   bundle.Rules
		refused bool
	}{
		{"promote", mk("thief_1", "census", jobspec.PromoteAlways, false), nil, true},
		{"if_blessed", mk("thief_2", "census", jobspec.PromoteIfBlessed, false), nil, true},
		{"rollout", mk("thief_3", "census", jobspec.PromoteNever, true), nil, true},
		{"owner only, no promote", mk("thief_4", "census", jobspec.PromoteNever, false), bundle.Rules{"census": {OwnerOnly: true}}, true},
		{"a version without promote", mk("adder_1", "census", jobspec.PromoteNever, false), nil, false},
		{"the owner", mk("census_1", "census", jobspec.PromoteAlways, false), nil, false},
		{"a job the rule names", mk("retrain_1", "census", jobspec.PromoteIfBlessed, false), bundle.Rules{"census": {Jobs: []string{"retrain_*"}}}, false},
		{"a model nobody owns", mk("fresh_1", "fresh", jobspec.PromoteAlways, false), nil, false},
		// a repository it cannot read is Publish's to report, after its
		// retries (cli.TestResetEveryPhase blocks a model's directory so)
		{"an unreadable model", mk("blocked_1", "blocked", jobspec.PromoteAlways, false), nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			acts.ModelOwners = c.rules
			_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: c.s, FirstRunID: "run1"})
			dir := filepath.Join(acts.Home, "jobs", c.s.JobID)
			if !c.refused {
				if err != nil {
					t.Fatalf("PrepareJob: %v, want it through", err)
				}
				return
			}
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeModelOwned || !ae.NonRetryable() ||
				!strings.Contains(err.Error(), "model census belongs to job census_1") || !strings.Contains(err.Error(), "--model-owners census=") {
				t.Fatalf("PrepareJob: %v, want a non-retryable ModelOwned refusal naming the model, its owner and the flag", err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("%s after the refusal: %v, want no directory", dir, err)
			}
		})
	}
}
