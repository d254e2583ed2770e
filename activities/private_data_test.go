package activities

import (
	"bytes"
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// TestDataNeverAnotherJobsPrivateFiles: issue #49's attack. A job whose
// data names another job's report key (or a parameter server's secret,
// or any other file of that job's directory) is refused, naming the
// field, by PrepareJob before it claims a directory or reads a byte, and
// by Preprocess for an input that skips PrepareJob: directly, through a
// file:// URI, through '..', and through a symbolic link in a data root
// into the victim's files. The victim's key is unchanged; a job's own
// generated data and data in a data root still work.
func TestDataNeverAnotherJobsPrivateFiles(t *testing.T) {
	ctx := context.Background()
	acts := newActs(t)
	e := env(acts)
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: spec("victim_1"), FirstRunID: "rv"}); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(acts.Home, "jobs", "victim_1")
	jd, err := acts.openJobDir(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jd.newReportKey(ctx, "rv"); err != nil {
		t.Fatal(err)
	}
	if _, err := jd.newPSSecret(ctx, 0); err != nil {
		t.Fatal(err)
	}
	jd.Close()
	key := filepath.Join(victim, jobdir.ReportKeyFile)
	before, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir() // inside a data root (newActs: os.TempDir())
	os.Symlink(key, filepath.Join(data, "train.jsonl"))
	os.Symlink(filepath.Join(victim, jobdir.ClusterDir), filepath.Join(data, "c"))
	os.Symlink(victim, filepath.Join(data, "v"))
	legit := filepath.Join(data, "legit.csv")
	os.WriteFile(legit, []byte("x\n"), 0o644)

	for i, c := range []struct{ name, loc, why string }{
		{"direct", key, "private"},
		{"file URI", "file://" + key, "private"},
		{"ps secret", filepath.Join(victim, jobdir.PSSecretFile(0)), "private"},
		{"dotdot", data + "/../" + strings.TrimPrefix(key, filepath.Dir(data)+"/"), "'..'"},
		{"symlink to the key", filepath.Join(data, "train.jsonl"), "private"},
		{"symlink to cluster/", filepath.Join(data, "c", "report.key"), "private"},
		{"symlink to the job dir", filepath.Join(data, "v", "cluster", "report.key"), "private"},
		{"another job's other file", filepath.Join(victim, jobdir.RawFile(preprocess.SplitTrain)), "job directory " + victim},
		{"through a link", filepath.Join(data, "v", jobdir.RawFile(preprocess.SplitTrain)), "job directory " + victim},
		{"the claim", filepath.Join(victim, jobdir.ClaimFile), "job directory " + victim},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spec("attacker_" + string(rune('a'+i)))
			s.Data.Train = []string{c.loc}
			s.Data.Eval = []string{legit}
			_, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "ra"})
			if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "data.train[0]") || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("PrepareJob: %v; want InvalidSpec naming data.train[0] and %q", err, c.why)
			}
			own := filepath.Join(acts.Home, "jobs", s.JobID)
			if _, err := os.Stat(own); err == nil {
				t.Errorf("PrepareJob made %s before refusing", own)
			}
			// A Preprocess input typed in (no PrepareJob): refused before
			// the child starts, nothing written.
			if c.why == "'..'" {
				return // the spec check alone refuses it; Preprocess gets resolved paths
			}
			os.MkdirAll(own, 0o755)
			os.WriteFile(filepath.Join(own, jobdir.ClaimFile), []byte(`{"job_id":"`+s.JobID+`"}`), 0o644)
			in := workflows.PreprocessInput{JobDir: own, Request: preprocess.Request{Schema: *s.Data.Schema, Train: []string{c.loc}, Eval: []string{legit},
				OutDir: own, TrainShards: 1, EvalShards: 1, Seed: 1, MaxBadFraction: 1}}
			_, err = e.ExecuteActivity(acts.Preprocess, in)
			if errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "data.train[0]") || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("Preprocess: %v; want InvalidSpec naming data.train[0] and %q", err, c.why)
			}
			for _, dir := range []string{preprocess.BadRecordsDir, preprocess.DataDir, "preprocess"} {
				if _, err := os.Stat(filepath.Join(own, dir)); err == nil {
					t.Errorf("Preprocess wrote %s before refusing", dir)
				}
			}
		})
	}
	// Other fields that name input files: data.dir (the census files
	// in it), and batch input_paths, whose patterns' matches are checked
	// one by one.
	d := spec("attacker_dir")
	d.Data.Dir = filepath.Join(victim, jobdir.ClusterDir)
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: d, FirstRunID: "rd"}); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "data.dir") {
		t.Fatalf("data.dir at the victim's cluster/: %v; want InvalidSpec naming data.dir", err)
	}
	for _, pattern := range []string{filepath.Join(acts.Home, "jobs", "*", jobdir.ClusterDir, "*"), filepath.Join(data, "*")} {
		if _, err := acts.batchInputs(ctx, []string{pattern}, t.TempDir()); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "input_paths[0]") {
			t.Fatalf("input_paths %s: %v; want InvalidSpec naming input_paths[0]", pattern, err)
		}
	}
	// The victim's own step cannot read its own private files either.
	in := workflows.PreprocessInput{JobDir: victim, Request: preprocess.Request{Schema: *spec("x").Data.Schema, Train: []string{key}, Eval: []string{legit},
		OutDir: victim, TrainShards: 1, EvalShards: 1, Seed: 1, MaxBadFraction: 1}}
	if _, err := e.ExecuteActivity(acts.Preprocess, in); errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "private") {
		t.Fatalf("a job's own report key as its data: %v; want InvalidSpec", err)
	}
	after, err := os.ReadFile(key)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the victim's report key changed (%v)", err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("the victim's report key: %v, %v; want mode 0600", fi.Mode(), err)
	}
	// Data in a data root, and a job's own generated rows, still work.
	s := spec("legit_1")
	s.Data.Train, s.Data.Eval = []string{legit}, []string{legit}
	if _, err := e.ExecuteActivity(acts.PrepareJob, workflows.PrepareInput{Spec: s, FirstRunID: "rl"}); err != nil {
		t.Fatalf("data in a data root: %v", err)
	}
	if _, pre := prepare(t, e, acts, spec("legit_2")); pre.TrainRows == 0 {
		t.Fatalf("a job's own generated rows: %+v", pre)
	}
}

// TestCheckJobFiles: which locations checkJobFiles lets a job read, with
// and without its own job directory known, locally (job directories told
// by their claim or by lying in the job root) and in object storage (by
// the job root URI's key prefix, and private files by name anywhere).
func TestCheckJobFiles(t *testing.T) {
	base := t.TempDir()
	home, data := filepath.Join(base, "home"), filepath.Join(base, "data")
	jobs := filepath.Join(home, "jobs")
	elsewhere := filepath.Join(data, "somejob") // a spec's job_dir in a data root
	for _, d := range []string{filepath.Join(jobs, "a", "cluster"), filepath.Join(jobs, "b", "raw"), filepath.Join(elsewhere, "cluster"), filepath.Join(data, "ds", "cluster")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(elsewhere, jobdir.ClaimFile), []byte(`{"job_id":"somejob"}`), 0o644)
	os.WriteFile(filepath.Join(jobs, "beside.csv"), []byte("x\n"), 0o644)
	a := &Activities{Home: home, DataRoots: []string{data, "mem://data"}}
	own := filepath.Join(jobs, "a")
	for _, c := range []struct {
		loc, own string
		ok       bool
	}{
		{filepath.Join(data, "ds", "train.csv"), "", true},
		{filepath.Join(data, "ds", "cluster", "train.csv"), "", true}, // a dataset may have a directory called cluster
		{filepath.Join(jobs, "beside.csv"), "", true},                 // beside the job directories, not in one
		{filepath.Join(jobs, "a", "raw", "train.csv"), own, true},
		{filepath.Join(jobs, "a", "raw", "train.csv"), "", false},
		{filepath.Join(jobs, "a", "cluster", "x.csv"), own, false},
		{filepath.Join(jobs, "a", "cluster"), own, false},
		{filepath.Join(jobs, "b", "raw", "train.csv"), own, false},
		{filepath.Join(jobs, "b"), own, false},
		{filepath.Join(elsewhere, "raw", "train.csv"), own, false},
		{filepath.Join(elsewhere, "cluster", "y"), "", false},
		{filepath.Join(data, "ds", "cluster", "report.key"), "", false},
		{filepath.Join(data, "ds", "cluster", "ps-12.secret"), "", false},
		{"mem://data/ds/train.csv", "", true},
		{"mem://data/ds/cluster/train.csv", "", true},
		{"mem://data/ds/cluster/report.key", "", false},
		{"mem://data/ds/cluster/ps-0.secret", "", false},
		{"mem://data/ds/cluster/*.csv", "", false}, // a pattern may match a private file
	} {
		_, err := a.locateDataOf("data.train[3]", c.loc, c.own)
		if c.ok && err != nil {
			t.Errorf("%s (own %q): %v; want it allowed", c.loc, c.own, err)
		}
		if !c.ok && (errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "data.train[3]")) {
			t.Errorf("%s (own %q): %v; want InvalidSpec naming data.train[3]", c.loc, c.own, err)
		}
	}
	// A job root in object storage: its first level are job directories.
	b := &Activities{Home: home, Jobs: "mem://jb/jobs"}
	ownURI := "mem://jb/jobs/a"
	for _, c := range []struct {
		loc, own string
		ok       bool
	}{
		{"mem://jb/jobs/a/raw/train.csv", ownURI, true},
		{"mem://jb/jobs/beside.csv", ownURI, true},
		{"mem://jb/jobs/a/raw/train.csv", "", false},
		{"mem://jb/jobs/a/cluster/z", ownURI, false},
		{"mem://jb/jobs/b/raw/train.csv", ownURI, false},
		{"mem://jb/jobs/b/cluster/report.key", ownURI, false},
		{"mem://jb/jobs/b/cluster/*", ownURI, false},
		{"mem://jb/jobs/b/*", ownURI, false},
	} {
		_, err := b.locateDataOf("data.eval[0]", c.loc, c.own)
		if c.ok && err != nil {
			t.Errorf("%s (own %q): %v; want it allowed", c.loc, c.own, err)
		}
		if !c.ok && (errType(err) != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), "data.eval[0]")) {
			t.Errorf("%s (own %q): %v; want InvalidSpec naming data.eval[0]", c.loc, c.own, err)
		}
	}
}

// TestReportKeyCheckedAgainstTheKeyOnDisk: the public report key a
// workflow holds is checked against the public half derived from the
// private key in the job directory; a different one (a forged ReportKey
// completion) is refused for good without quoting either key, and the
// public half ReportKey returns is the one derived from the file it
// wrote.
func TestReportKeyCheckedAgainstTheKeyOnDisk(t *testing.T) {
	ctx := context.Background()
	a := &Activities{Home: t.TempDir()}
	a.DataRoots = []string{a.Home}
	jd, err := a.openJobDir(ctx, filepath.Join(a.Home, "job"))
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	forged, _, _ := ed25519.GenerateKey(crand.Reader)
	if err := jd.checkReportKey(ctx, nil); err != nil {
		t.Fatalf("no key anywhere (a run from before signed reports): %v", err)
	}
	if err := jd.checkReportKey(ctx, forged); errType(err) != workflows.ErrTypeReportKeyMismatch {
		t.Fatalf("a key the job directory does not hold: %v; want %s", err, workflows.ErrTypeReportKeyMismatch)
	}
	pub, err := jd.newReportKey(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	priv, err := jd.reportKey(ctx)
	if err != nil || !priv.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatalf("ReportKey's public half is not the file's (%v)", err)
	}
	if err := jd.checkReportKey(ctx, pub); err != nil {
		t.Fatalf("the run's own key: %v", err)
	}
	err = jd.checkReportKey(ctx, forged)
	if errType(err) != workflows.ErrTypeReportKeyMismatch || !strings.Contains(err.Error(), "not the public half") {
		t.Fatalf("a forged key: %v; want %s", err, workflows.ErrTypeReportKeyMismatch)
	}
	for _, k := range [][]byte{forged, priv.Seed(), pub} {
		if bytes.Contains([]byte(err.Error()), k) {
			t.Fatal("the error quotes a key")
		}
	}
	// A key file of another run (a reset) does not verify this run's key.
	if _, err := jd.newReportKey(ctx, "run-2"); err != nil {
		t.Fatal(err)
	}
	if err := jd.checkReportKey(ctx, pub); errType(err) != workflows.ErrTypeReportKeyMismatch {
		t.Fatalf("run-1's key after run-2 replaced it: %v; want %s", err, workflows.ErrTypeReportKeyMismatch)
	}
	// A malformed key file is replaced by a new run's key, never used.
	os.WriteFile(filepath.Join(a.Home, "job", jobdir.ReportKeyFile), []byte("not a key"), 0o600)
	if _, err := jd.reportKey(ctx); err == nil || strings.Contains(err.Error(), "not a key") {
		t.Fatalf("malformed key file: %v; want an error that does not quote it", err)
	}
	if _, err := jd.newReportKey(ctx, "run-3"); err != nil {
		t.Fatalf("a new run over a malformed key file: %v", err)
	}
}

// TestWorkerPrivateDirIsNoLocation checks that no spec location, data or
// job directory, may lie in the worker's own private directory (its
// result keys), even where a data root holds it, as the tests' /tmp does.
func TestWorkerPrivateDirIsNoLocation(t *testing.T) {
	base := t.TempDir()
	keys := filepath.Join(base, "home", "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(keys, "results.key")
	if err := os.WriteFile(key, []byte("k "+strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(key, filepath.Join(base, "innocent.csv")); err != nil {
		t.Fatal(err)
	}
	a := &Activities{Home: filepath.Join(base, "home"), DataRoots: []string{base}, Private: []string{keys}}
	for _, loc := range []string{key, "file://" + key, filepath.Join(base, "innocent.csv"), keys} {
		if _, err := a.locateData("data.train[0]", loc); err == nil || !strings.Contains(err.Error(), "private directory") {
			t.Errorf("locateData(%s): %v, want refused as the worker's private directory", loc, err)
		}
	}
	if _, err := a.locate("job_dir", filepath.Join(keys, "job"), true); err == nil || !strings.Contains(err.Error(), "private directory") {
		t.Errorf("a job_dir in the private directory: %v, want refused", err)
	}
	if _, err := a.locateData("data.train[0]", filepath.Join(base, "other.csv")); err != nil {
		t.Errorf("a data file beside it: %v, want allowed", err)
	}
}
