package activities

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/resultsig"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/train/dist"
	"github.com/trainflow/trainflow/workflows"
)

// TestParameterServerSecretsAreNotInTheJobDir: what makes a parameter
// server's secret is written into the job directory, private to the
// worker's user when local, and a worker derives each server's current
// secret from it; a server with no address yet needs none, one whose
// file is missing is an error. With the worker's result keys the file
// holds a nonce, never the secret, and the nonce copied into another job
// directory derives another secret; without keys (a step alone in a
// unit test) the secret itself is stored, as before.
func TestParameterServerSecretsAreNotInTheJobDir(t *testing.T) {
	ctx := context.Background()
	local, bucket := t.TempDir(), t.TempDir()
	for _, c := range []struct{ uri, root string }{
		{filepath.Join(local, "job"), local},
		{"file://" + filepath.Join(bucket, "bucket"), "file://" + bucket},
		{"mem://secrets-test/job", "mem://secrets-test"},
	} {
		for _, keys := range []*resultsig.Keyring{nil, testKeyring(t)} {
			uri := c.uri
			a := &Activities{Home: t.TempDir(), DataRoots: []string{c.root}, Keys: keys}
			jd, err := a.openJobDir(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			defer jd.Close()
			var second string
			for range 2 { // a restart replaces it
				if second, err = jd.newPSSecret(ctx, 1); err != nil {
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
			if keys == nil {
				continue
			}
			// With keys, the job directory holds no secret, and what it
			// holds derives the secret in this directory only.
			stored, err := jd.st.Read(ctx, jobdir.PSSecretFile(1))
			if err != nil || strings.Contains(string(stored), second) || len(second) != 64 {
				t.Fatalf("%s: stored %q (%v) for secret %q; want a nonce, not the secret", uri, stored, err, second)
			}
			other, err := a.openJobDir(ctx, uri+"-copy")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if err := other.st.Write(ctx, jobdir.PSSecretFile(1), stored); err != nil {
				t.Fatal(err)
			}
			c = dist.Cluster{Addrs: []string{"", "h:1"}}
			if err := other.psSecrets(ctx, &c); err != nil || c.Secrets[1] == second {
				t.Fatalf("%s: the nonce copied into another job directory derives %q, %v; want another secret", uri, c.Secrets[1], err)
			}
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

// testKeyring is a result keyring of one key, as a worker loads it.
func testKeyring(t testing.TB) *resultsig.Keyring {
	t.Helper()
	k, err := resultsig.Parse([]byte("test1 " + strings.Repeat("ab", 32) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestReportKeyIsNotInTheJobDir: with the worker's result keys, the
// report key file holds a nonce, never the key: every worker holding the
// same result key derives the same private key from it (the signers), a
// worker with another key derives nothing and says which key it lacks,
// and the file copied into another job directory (a job that could read
// it) derives another key, which the run's public key does not verify.
func TestReportKeyIsNotInTheJobDir(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	keys := testKeyring(t)
	a := &Activities{Home: t.TempDir(), DataRoots: []string{root}, Keys: keys}
	jd, err := a.openJobDir(ctx, filepath.Join(root, "job"))
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	pub, err := jd.newReportKey(ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	priv, err := jd.reportKey(ctx)
	if err != nil || priv == nil || !priv.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatalf("the signers' key: %v, %v; want the private half of the run's public key", priv, err)
	}
	stored, err := jd.st.Read(ctx, jobdir.ReportKeyFile)
	if err != nil || strings.Contains(string(stored), `"seed"`) || bytes.Contains(stored, priv.Seed()) ||
		strings.Contains(string(stored), base64.StdEncoding.EncodeToString(priv.Seed())) {
		t.Fatalf("the job directory's report key file %s (%v): want a nonce, never the seed", stored, err)
	}
	if err := jd.checkReportKey(ctx, pub); err != nil {
		t.Fatalf("checkReportKey of the run's own key: %v", err)
	}

	// Another worker process, same key file: the same key.
	same, err := resultsig.Parse([]byte("test1 " + strings.Repeat("ab", 32) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := &Activities{Home: t.TempDir(), DataRoots: []string{root}, Keys: same}
	jd2, err := b.openJobDir(ctx, filepath.Join(root, "job"))
	if err != nil {
		t.Fatal(err)
	}
	defer jd2.Close()
	if k, err := jd2.reportKey(ctx); err != nil || !k.Equal(priv) {
		t.Fatalf("another worker with the same result key derives %v, %v; want the same key", k, err)
	}
	// A worker without that key.
	other, err := resultsig.Parse([]byte("test2 " + strings.Repeat("cd", 32) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Activities{Home: t.TempDir(), DataRoots: []string{root}, Keys: other}
	jd3, err := c.openJobDir(ctx, filepath.Join(root, "job"))
	if err != nil {
		t.Fatal(err)
	}
	defer jd3.Close()
	if _, err := jd3.reportKey(ctx); err == nil || !strings.Contains(err.Error(), `"test1"`) || !strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("a worker without the result key: %v; want an error naming the key it lacks", err)
	}
	// The file copied into another job's directory.
	thief, err := a.openJobDir(ctx, filepath.Join(root, "thief"))
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Close()
	if err := thief.WritePrivate(ctx, jobdir.ReportKeyFile, stored); err != nil {
		t.Fatal(err)
	}
	if k, err := thief.reportKey(ctx); err != nil || k.Equal(priv) {
		t.Fatalf("the nonce in another job directory derives %v, %v; want another key", k, err)
	}
	if err := thief.checkReportKey(ctx, pub); errType(err) != workflows.ErrTypeReportKeyMismatch {
		t.Fatalf("the run's public key against the thief's derived key: %v; want ReportKeyMismatch", err)
	}
}
