package activities

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/workflows"
)

// prepareAs runs PrepareJob for job id as the workflow run owner (first
// run ID run, parent workflow parent) would, and returns its directory.
func prepareAs(t *testing.T, acts *Activities, id, run, parent string) string {
	t.Helper()
	asJob(acts, id)
	owner := &workflows.JobOwner{JobID: id, FirstRunID: run}
	v, err := env(acts).ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: spec(id), FirstRunID: run, Owner: owner, Parent: parent})
	if err != nil {
		t.Fatalf("prepare %s: %v", id, err)
	}
	var res workflows.PrepareResult
	v.Get(&res)
	return res.JobDir
}

// fakeBundle makes dir/export/<exporter>/<step> look like a complete
// bundle (its metadata) and returns it.
func fakeBundle(t *testing.T, dir, exporter, step string) string {
	t.Helper()
	b := filepath.Join(dir, jobdir.ExportDir, exporter, step)
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, bundle.MetadataFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func present(p string) bool { _, err := os.Stat(p); return err == nil }

// TestClaimRecordsOwnerAndParent: PrepareJob writes the claim with the
// parent the workflow names, and refuses to claim for another job than
// the one that scheduled it.
func TestClaimRecordsOwnerAndParent(t *testing.T) {
	acts := newActs(t)
	dir := prepareAs(t, acts, "hp_1_trial_1", "run-t1", "hp_1")
	b, err := os.ReadFile(filepath.Join(dir, jobdir.ClaimFile))
	if err != nil {
		t.Fatal(err)
	}
	var c jobdir.Claim
	if json.Unmarshal(b, &c) != nil || c != (jobdir.Claim{JobID: "hp_1_trial_1", FirstRunID: "run-t1", Parent: "hp_1", Version: jobdir.ClaimVersion}) {
		t.Errorf("claim %s", b)
	}
	asJob(acts, "thief_1")
	_, err = env(acts).ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: spec("census_9"), FirstRunID: "r", Owner: &workflows.JobOwner{JobID: "census_9", FirstRunID: "r"}})
	if errType(err) != workflows.ErrTypeNotOwner || present(filepath.Join(acts.Home, "jobs", "census_9")) {
		t.Errorf("PrepareJob of census_9 scheduled by thief_1: %v, want NotOwner and no directory", err)
	}
}

// TestStepsRefuseAnotherJobsDirectory replays, one activity at a time,
// what a forged carry made the steps do: a job's steps given another
// job's directory (the victim's export to delete, its checkpoints to
// read) are refused, not retried, before anything is touched, whether the
// input names the thief as owner, the victim (forged), or nobody (a run
// from before owners); the victim's files stay.
func TestStepsRefuseAnotherJobsDirectory(t *testing.T) {
	acts := newActs(t)
	victim := prepareAs(t, acts, "victim_1", "run-v", "")
	best := fakeBundle(t, victim, "best", "100")
	thief := &workflows.JobOwner{JobID: "thief_1", FirstRunID: "run-t"}
	forged := &workflows.JobOwner{JobID: "victim_1", FirstRunID: "run-v"}
	asJob(acts, "thief_1")
	e := env(acts)
	for _, owner := range []*workflows.JobOwner{thief, forged, nil} {
		_, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: best, Owner: owner})
		if errType(err) != workflows.ErrTypeNotOwner || strings.Contains(err.Error(), "run-v") {
			t.Errorf("DeleteExport of the victim's bundle, owner %+v: %v, want NotOwner without the claim's content", owner, err)
		}
		_, err = e.ExecuteActivity(acts.Export, workflows.ExportInput{JobID: "thief_1", JobDir: victim, Exporter: "best", Step: 200, Owner: owner})
		if errType(err) != workflows.ErrTypeNotOwner {
			t.Errorf("Export into the victim's directory, owner %+v: %v, want NotOwner", owner, err)
		}
		_, err = e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: victim, Step: 100, Owner: owner})
		if errType(err) != workflows.ErrTypeNotOwner {
			t.Errorf("Evaluate in the victim's directory, owner %+v: %v, want NotOwner", owner, err)
		}
		_, err = e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: "thief_1", Bundle: best, Model: "census", Promote: true, Owner: owner})
		if errType(err) != workflows.ErrTypeNotOwner {
			t.Errorf("Publish of the victim's bundle, owner %+v: %v, want NotOwner", owner, err)
		}
	}
	if !present(filepath.Join(best, bundle.MetadataFile)) || present(filepath.Join(victim, jobdir.ExportDir, "best", "200")) {
		t.Error("the victim's export directory changed")
	}
	if ms, _ := acts.Models.Models(t.Context()); len(ms) != 0 {
		t.Errorf("models %v published", ms)
	}

	// The victim itself, from another first run (a new job under its ID),
	// is refused too.
	asJob(acts, "victim_1")
	_, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: best, Owner: &workflows.JobOwner{JobID: "victim_1", FirstRunID: "run-other"}})
	if errType(err) != workflows.ErrTypeNotOwner || !present(best) {
		t.Errorf("DeleteExport by another first run: %v, want NotOwner", err)
	}
}

// TestDeleteExportOnlyUnderExport: the job's own DeleteExport deletes one
// bundle of export/, nothing above, beside or below it.
func TestDeleteExportOnlyUnderExport(t *testing.T) {
	acts := newActs(t)
	dir := prepareAs(t, acts, "census_1", "run-c", "")
	best := fakeBundle(t, dir, "best", "100")
	owner := &workflows.JobOwner{JobID: "census_1", FirstRunID: "run-c"}
	e := env(acts)
	os.MkdirAll(filepath.Join(dir, "checkpoints", "x"), 0o755)
	for _, d := range []string{
		dir,
		filepath.Join(dir, "checkpoints"),
		filepath.Join(dir, "checkpoints", "x"),
		filepath.Join(dir, jobdir.ExportDir),
		filepath.Join(dir, jobdir.ExportDir, "best"),
		filepath.Join(dir, jobdir.ExportDir, "best", "100", bundle.MetadataFile),
		filepath.Join(dir, jobdir.ExportDir, "best", "0100"),
		filepath.Join(dir, jobdir.ExportDir, "best", "100", "..", "..", ".."),
		"file://" + filepath.Join(dir, jobdir.ExportDir, "best") + "/%2e%2e",
		filepath.Join(filepath.Dir(dir), "other", jobdir.ExportDir, "best", "1"),
		"",
	} {
		_, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: d, Owner: owner})
		if err == nil {
			t.Errorf("DeleteExport(%q) succeeded", d)
		}
	}
	if !present(filepath.Join(best, bundle.MetadataFile)) || !present(filepath.Join(dir, jobdir.ClaimFile)) || !present(filepath.Join(dir, "checkpoints", "x")) {
		t.Fatal("a refused DeleteExport deleted something")
	}
	if _, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: best, Owner: owner}); err != nil {
		t.Fatalf("the job's own DeleteExport: %v", err)
	}
	if present(filepath.Join(best, bundle.MetadataFile)) {
		t.Error("the bundle is still there")
	}
}

// TestTrialExportOnlyOwnTrials: a tuning job's TrialExport and
// TrialEvaluations take only directories of trials it started: not
// another job's (a fake SUCCEEDED trial in a forged carry), not a job a
// client started under a trial's name, not another tuning job's trial.
func TestTrialExportOnlyOwnTrials(t *testing.T) {
	acts := newActs(t)
	trial := prepareAs(t, acts, "hp_1_trial_1", "run-1", "hp_1")
	fakeBundle(t, trial, "best", "40")
	posing := prepareAs(t, acts, "hp_1_trial_2", "run-2", "") // started by a client, not by hp_1
	fakeBundle(t, posing, "best", "40")
	victim := prepareAs(t, acts, "census_1", "run-c", "")
	fakeBundle(t, victim, "best", "40")
	other := prepareAs(t, acts, "hq_1_trial_1", "run-q", "hq_1")
	fakeBundle(t, other, "best", "40")

	asJob(acts, "hp_1")
	owner := &workflows.JobOwner{JobID: "hp_1", FirstRunID: "run-hp"}
	e := env(acts)
	v, err := e.ExecuteActivity(acts.TrialExport, workflows.TrialExportInput{JobDir: trial, Exporter: "best", Owner: owner})
	if err != nil {
		t.Fatalf("TrialExport of its own trial: %v", err)
	}
	var got string
	v.Get(&got)
	if got != filepath.Join(trial, jobdir.ExportDir, "best", "40") {
		t.Errorf("TrialExport = %s", got)
	}
	for _, dir := range []string{posing, victim, other} {
		if _, err := e.ExecuteActivity(acts.TrialExport, workflows.TrialExportInput{JobDir: dir, Exporter: "best", Owner: owner}); errType(err) != workflows.ErrTypeNotOwner {
			t.Errorf("TrialExport of %s: %v, want NotOwner", dir, err)
		}
	}
	refs := []workflows.TrialRef{{Number: 1, ID: "hp_1_trial_1"}, {Number: 3, ID: "hp_1_trial_3"}}
	if _, err := e.ExecuteActivity(acts.TrialEvaluations, workflows.TrialEvaluationsInput{Trials: refs, Metric: "auc", Name: "eval", Owner: owner}); err != nil {
		t.Errorf("TrialEvaluations of its own trial and one not started: %v", err)
	}
	refs = []workflows.TrialRef{{Number: 1, ID: "x", JobDir: victim}}
	if _, err := e.ExecuteActivity(acts.TrialEvaluations, workflows.TrialEvaluationsInput{Trials: refs, Metric: "auc", Name: "eval", Owner: owner}); errType(err) != workflows.ErrTypeNotOwner {
		t.Errorf("TrialEvaluations of another job's directory: %v, want NotOwner", err)
	}
	// The tuning job publishes its trial's export, not the victim's.
	_, err = e.ExecuteActivity(acts.Publish, workflows.PublishInput{JobID: "hp_1", Bundle: filepath.Join(victim, jobdir.ExportDir, "best", "40"), Model: "census", Promote: true, Owner: owner})
	if errType(err) != workflows.ErrTypeNotOwner {
		t.Errorf("Publish of another job's bundle by a tuning job: %v, want NotOwner", err)
	}
}

// TestDeleteExportInObjectStorage: the owner check and the confinement to
// export/<exporter>/<step> hold for job directories in object storage
// (file:// and mem:// buckets) as for local ones.
func TestDeleteExportInObjectStorage(t *testing.T) {
	for _, kind := range jobDirs(t)[1:] {
		t.Run(kind.name, func(t *testing.T) {
			acts := newActs(t)
			dirOf := map[string]string{}
			for _, id := range []string{"victim_1", "census_1"} {
				s := spec(id)
				s.JobDir = kind.dir(id)
				if strings.HasPrefix(s.JobDir, "mem://") {
					acts.DataRoots = append(acts.DataRoots, "mem://"+strings.SplitN(strings.TrimPrefix(s.JobDir, "mem://"), "/", 2)[0])
				}
				asJob(acts, id)
				owner := &workflows.JobOwner{JobID: id, FirstRunID: "run-" + id}
				v, err := env(acts).ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: owner.FirstRunID, Owner: owner})
				if err != nil {
					t.Fatalf("prepare %s: %v", id, err)
				}
				var res workflows.PrepareResult
				v.Get(&res)
				dirOf[id] = res.JobDir
				st, err := storage.Open(t.Context(), res.JobDir)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Write(t.Context(), "export/best/100/"+bundle.MetadataFile, []byte("{}")); err != nil {
					t.Fatal(err)
				}
				st.Close()
			}
			bundleOf := func(id string) string { return jobdir.Join(dirOf[id], "export/best/100") }
			has := func(id string) bool {
				ok, err := jobdir.Exists(t.Context(), jobdir.Join(bundleOf(id), bundle.MetadataFile))
				return err == nil && ok
			}
			owner := &workflows.JobOwner{JobID: "census_1", FirstRunID: "run-census_1"}
			e := env(acts)
			if _, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: bundleOf("victim_1"), Owner: owner}); errType(err) != workflows.ErrTypeNotOwner || !has("victim_1") {
				t.Errorf("DeleteExport of the victim's bundle: %v, want NotOwner and the bundle kept", err)
			}
			if _, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: jobdir.Join(dirOf["census_1"], "export/best"), Owner: owner}); err == nil || !has("census_1") {
				t.Errorf("DeleteExport of export/best: %v, want a refusal", err)
			}
			if _, err := e.ExecuteActivity(acts.DeleteExport, workflows.DeleteExportInput{Dir: bundleOf("census_1"), Owner: owner}); err != nil || has("census_1") {
				t.Errorf("the job's own DeleteExport: %v, bundle still there: %v", err, has("census_1"))
			}
		})
	}
}
