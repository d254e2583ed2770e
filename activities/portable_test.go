package activities

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// TestPreprocessOnPortableRunner runs the Preprocess activity with
// data.runner universal against prism's job server in a process of its own:
// the job must run there under the spec's job name, and its outputs must
// equal those of the default in-process run, byte for byte. About 5 s:
// prism's packages are already compiled for this test binary, so its go
// build only links.
func TestPreprocessOnPortableRunner(t *testing.T) {
	endpoint, jobs := startPrism(t)
	acts := newActs(t)
	acts.BeamRunners = []string{jobspec.RunnerUniversal}
	e := env(acts)

	// The rows a generated job would make, in a data root: both runs
	// below read the same files (a job reads no other job's files).
	s := spec("portable_1")
	rows := t.TempDir()
	for i, out := range []*[]string{&s.Data.Train, &s.Data.Eval} {
		n, test := s.Data.GeneratedRows, i == 1
		if test {
			n = max(1, n/4)
		}
		f, err := os.Create(filepath.Join(rows, strconv.Itoa(i)+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		if err := datagen.Census(f, n, s.Train.Seed+uint64(i), test); err != nil {
			t.Fatal(err)
		}
		f.Close()
		*out = []string{f.Name()}
	}
	s.Data.Runner, s.Data.RunnerEndpoint, s.Data.EnvironmentType = jobspec.RunnerUniversal, endpoint, jobspec.EnvLoopback
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	prep, got := prepare(t, e, acts, s)

	// The same request on the default in-process runner.
	localDir := filepath.Join(t.TempDir(), "local")
	in := workflows.PreprocessInput{JobDir: localDir, Request: preprocess.Request{Schema: *s.Data.Schema, Train: prep.Train, Eval: prep.Eval,
		OutDir: localDir, TrainShards: 2, EvalShards: 1, Seed: 1, MaxBadFraction: 0.001}}
	v, err := e.ExecuteActivity(acts.Preprocess, in)
	if err != nil {
		t.Fatal(err)
	}
	var want jobspec.PreprocessResult
	v.Get(&want)
	if got != want || got.TrainRows != 800 {
		t.Fatalf("portable run %+v, want the in-process run's %+v (800 train rows)", got, want)
	}
	m, err := preprocess.ReadManifest(prep.JobDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{preprocess.TransformPath, preprocess.ManifestPath} {
		sameFile(t, filepath.Join(prep.JobDir, f), filepath.Join(localDir, f))
	}
	for _, sh := range append(m.Train, m.Eval...) {
		sameFile(t, filepath.Join(prep.JobDir, preprocess.DataDir, sh.Name), filepath.Join(localDir, preprocess.DataDir, sh.Name))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := jobs.GetJobs(ctx, &jobpb.GetJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range resp.GetJobInfo() {
		names = append(names, j.GetJobName()+":"+j.GetState().String())
	}
	if len(names) != 1 || names[0] != "portable-1:DONE" {
		t.Fatalf("prism's jobs %q, want [portable-1:DONE]", names)
	}
}

// sameFile fails t unless the files at got and want have the same bytes.
func sameFile(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("%s (%d bytes) differs from %s (%d bytes)", got, len(g), want, len(w))
	}
}

// startPrism builds prism's standalone job server, starts it on a free
// port and returns its endpoint and a client of its job service. It skips
// t if the module cannot build it.
func startPrism(t *testing.T) (string, jobpb.JobServiceClient) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build prism: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "prism")
	build := exec.Command(goTool, "build", "-o", bin, "github.com/apache/beam/sdks/v2/go/cmd/prism")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("go build prism: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logPath := filepath.Join(dir, "prism.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--job_port="+strconv.Itoa(port), "--serve_http=false")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prism log:\n%s", b)
		}
	})
	endpoint := "localhost:" + strconv.Itoa(port)
	cc, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	jobs := jobpb.NewJobServiceClient(cc)
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := jobs.GetJobs(ctx, &jobpb.GetJobsRequest{})
		cancel()
		if err == nil {
			return endpoint, jobs
		}
		if time.Now().After(deadline) {
			t.Fatalf("prism's job server at %s did not answer: %v", endpoint, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
