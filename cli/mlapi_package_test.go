package cli

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/mlapi"
)

// TestMLAPIPackageJob: an ml/v1 job names its trainer package as Cloud ML
// Engine's did, the sdist setuptools makes (one trainer-0.1/ directory)
// in a staging location (trainingInput.packageUris),
// here inside the server's --ml-package-roots: the job installs and runs
// it on a worker with --allow-packages, and its replicas read a
// TF_CONFIG naming the package as sent and, for runtime 1.15, the chief
// master. A package outside the roots, a link under one or a directory is
// a 400 naming trainingInput.packageUris, and starts nothing.
func TestMLAPIPackageJob(t *testing.T) {
	staging := t.TempDir()
	if err := os.Chmod(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	st, home := packageStack(t, true, func(c *stackConfig) { c.ML = &mlFlags{packageRoots: listFlag{staging}} })
	// The sdist setuptools made (trainer-0.1/…), as gcloud staged it.
	archive, err := os.ReadFile("../train/app/testdata/sdist/trainer-0.1.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(staging, "trainer-0.1.tar.gz")
	if err := os.WriteFile(pkg, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "other.tar.gz")
	if err := os.WriteFile(outside, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(staging, "link.tar.gz")); err != nil {
		t.Fatal(err)
	}
	jobsURL := "http://" + st.HTTPAddr + "/v1/projects/my-project/jobs"

	for _, tc := range []struct{ uri, want string }{
		{outside, "not inside the package roots"},
		{filepath.Join(staging, "link.tar.gz"), "not a regular file of its own reached without links"},
		{staging, "want a source archive"},
		{"gs://staging-bucket/trainer-0.1.tar.gz", "not inside the package roots"},
	} {
		code, body := curl(t, "POST", jobsURL, fmt.Sprintf(`{"jobId": "pkg_refused", "trainingInput": {"packageUris": [%q], "pythonModule": "trainer.task"}}`, tc.uri))
		wantGoogleError(t, tc.uri, code, body, http.StatusBadRequest, "INVALID_ARGUMENT", "trainingInput.packageUris")
		if !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %s; want it to say %q", tc.uri, body, tc.want)
		}
	}
	code, body := curl(t, "GET", jobsURL+"/pkg_refused", "")
	wantGoogleError(t, "the refused job", code, body, http.StatusNotFound, "NOT_FOUND", "pkg_refused")

	created := mlJob(t, "POST", jobsURL, fmt.Sprintf(`{
  "jobId": "pkg_api",
  "trainingInput": {
    "scaleTier": "BASIC",
    "packageUris": [%q],
    "pythonModule": "trainer.task",
    "args": ["--x=1"],
    "region": "us-central1",
    "runtimeVersion": "1.15"
  }
}`, pkg))
	if created.JobID != "pkg_api" {
		t.Fatalf("created %+v", created)
	}
	if _, err := waitJob(t, clientRun(st, "pkg_api")); err != nil {
		t.Fatalf("pkg_api: %v", err)
	}
	if got := mlJob(t, "GET", jobsURL+"/pkg_api", ""); got.State != mlapi.StateSucceeded {
		t.Errorf("pkg_api: %+v", got)
	}
	log := replicaLog(t, filepath.Join(home, "jobs", "pkg_api"), "chief-0")
	tf := line(log, "TF_CONFIG")
	for _, want := range []string{`"cluster":{"master":[`, `"task":{"type":"master"`, fmt.Sprintf(`"package_uris":[%q],"python_module":"trainer.task","args":["--x=1"]`, pkg), `"region":"us-central1","runtime_version":"1.15"`} {
		if !strings.Contains(tf, want) {
			t.Errorf("TF_CONFIG %s: want %s", tf, want)
		}
	}
}
