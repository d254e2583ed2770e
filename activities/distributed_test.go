package activities

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/trainflow/trainflow/train/dist"
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
			for p, want := range map[string]os.FileMode{"cluster": 0o700 | os.ModeDir, "cluster/ps-1.secret": 0o600} {
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
