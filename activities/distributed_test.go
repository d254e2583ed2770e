package activities

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/dist"
	"github.com/trainflow/trainflow/workflows"
)

// TestParameterServerSecretsStayInTheJobDir: a parameter server's secret
// is written into the job directory, private to the worker's user when
// local, and a worker reads each server's current one back; a server with
// no address yet needs none, one whose secret is missing is an error.
func TestParameterServerSecretsStayInTheJobDir(t *testing.T) {
	ctx := context.Background()
	local, bucket := t.TempDir(), t.TempDir()
	for _, c := range []struct{ uri, root string }{
		{filepath.Join(local, "job"), local},
		{"file://" + filepath.Join(bucket, "bucket"), "file://" + bucket},
		{"mem://secrets-test/job", "mem://secrets-test"},
	} {
		uri := c.uri
		a := &Activities{Home: t.TempDir(), DataRoots: []string{c.root}}
		jd, err := a.openJobDir(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		defer jd.Close()
		first, second := dist.NewSecret(), dist.NewSecret()
		for _, s := range []string{first, second} { // a restart replaces it
			if err := jd.writePSSecret(ctx, 1, s); err != nil {
				t.Fatal(err)
			}
		}
		if dir, ok := jd.st.LocalDir(); ok {
			for p, want := range map[string]os.FileMode{jobdir.ClusterDir: 0o700 | os.ModeDir, jobdir.PSSecretFile(1): 0o600} {
				fi, err := os.Stat(filepath.Join(dir, p))
				if err != nil || fi.Mode() != want {
					t.Fatalf("%s: %v, %v; want mode %v", p, fi.Mode(), err, want)
				}
			}
		}
		c := dist.Cluster{Addrs: []string{"", "h:1"}}
		if err := jd.psSecrets(ctx, &c); err != nil || c.Secrets[0] != "" || c.Secrets[1] != second {
			t.Fatalf("%s: secrets %q, %v; want the newest of server 1", uri, c.Secrets, err)
		}
		c = dist.Cluster{Addrs: []string{"h:0", "h:1"}}
		if err := jd.psSecrets(ctx, &c); err == nil {
			t.Fatalf("%s: server 0 has no secret, but reading it succeeded", uri)
		}
	}
}

// TestEvalQueueBoundedByKeep: a trainer that pins every checkpoint for the
// evaluator (throttle_secs 0) keeps only the keep_checkpoint_max newest
// pinned, plus one the evaluator may be reading, however far the
// evaluator is behind; retention then frees the rest.
func TestEvalQueueBoundedByKeep(t *testing.T) {
	ctx := context.Background()
	a := &Activities{Home: t.TempDir()}
	a.DataRoots = []string{a.Home}
	jd, err := a.openJobDir(ctx, filepath.Join(a.Home, "job"))
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	in := workflows.TrainInput{PinForEval: true, Train: jobspec.TrainSpec{KeepCheckpointMax: 3}}
	keep := evalQueue(in)
	if keep != 4 {
		t.Fatalf("evalQueue %d, want keep_checkpoint_max + 1 = 4", keep)
	}
	if n := evalQueue(workflows.TrainInput{Train: in.Train}); n != 0 {
		t.Fatalf("evalQueue without PinForEval: %d, want 0", n)
	}
	cks := jd.Checkpoints()
	meta := train.CheckpointMeta{Model: "linear", Dim: 1, Classes: 2}
	for step := int64(1); step <= 50; step++ {
		ck := &train.Checkpoint{Step: step, Meta: meta, Tensors: map[string][]float64{"params": {1, 2}}}
		if err := cks.Save(ctx, ck, 3); err != nil {
			t.Fatal(err)
		}
		if err := jd.queueForEval(ctx, step, keep); err != nil {
			t.Fatal(err)
		}
	}
	queued, err := cks.In(jobdir.QueueDir).Steps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{47, 48, 49, 50}; !slices.Equal(queued, want) {
		t.Fatalf("queued %v after 50 commits, want %v", queued, want)
	}
	for _, s := range queued { // each queued checkpoint is still readable
		if _, err := jd.pinCheckpoint(ctx, s); err != nil {
			t.Fatalf("pin queued %d: %v", s, err)
		}
	}
}

// TestReportKeyPerRun: each run gets its own report key (a retry of the
// same run gets the same one), written private to the job directory; the
// trainers and parameter servers sign with the current one, which only
// its public half verifies.
func TestReportKeyPerRun(t *testing.T) {
	ctx := context.Background()
	a := &Activities{Home: t.TempDir()}
	a.DataRoots = []string{a.Home}
	jd, err := a.openJobDir(ctx, filepath.Join(a.Home, "job"))
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	if k, err := jd.reportKey(ctx); k != nil || err != nil {
		t.Fatalf("report key before any run: %v, %v; want none", k, err)
	}
	first, err := jd.newReportKey(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := jd.newReportKey(ctx, "run-1")
	if err != nil || !first.Equal(again) {
		t.Fatalf("a retry of run-1 got another key (%v)", err)
	}
	second, err := jd.newReportKey(ctx, "run-2")
	if err != nil || second.Equal(first) {
		t.Fatalf("run-2 got run-1's key (%v)", err)
	}
	if dir, ok := jd.st.LocalDir(); ok {
		if fi, err := os.Stat(filepath.Join(dir, jobdir.ReportKeyFile)); err != nil || fi.Mode() != 0o600 {
			t.Fatalf("%s: %v, %v; want mode 0600", jobdir.ReportKeyFile, fi.Mode(), err)
		}
	}
	c := workflows.CheckpointCommitted{Step: 7}
	key, err := jd.reportKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sig := ed25519.Sign(key, workflows.CommitReportBytes("job", c))
	if !ed25519.Verify(second, workflows.CommitReportBytes("job", c), sig) || ed25519.Verify(first, workflows.CommitReportBytes("job", c), sig) {
		t.Fatal("reports are not signed with the current run's key")
	}
	r := workflows.PSRegistration{Task: 1, Addr: "h:1", RunID: "run-2"}
	if err := jd.signRegistration(ctx, "job", &r); err != nil || !ed25519.Verify(second, workflows.RegistrationReportBytes("job", r), r.Signature) {
		t.Fatalf("registration not signed with the run's key (%v)", err)
	}
}
