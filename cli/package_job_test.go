package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/testenv/realtest"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/train/app"
	"github.com/trainflow/trainflow/workflows"
)

// packageStack starts the dev stack, with --allow-packages when allow, in
// a home the sandbox's user (nobody, the worker being root) can reach by
// name: t.TempDir's directories are private to root.
func packageStack(t *testing.T, allow bool, opts ...func(*stackConfig)) (*stack, string) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		realtest.Missing(t, "bubblewrap is not installed (apt-get install bubblewrap)")
	}
	if _, err := os.Stat(debianPython); err != nil {
		realtest.Missing(t, debianPython+" is missing (apt-get install python3)")
	}
	home := t.TempDir()
	for _, d := range []string{home, filepath.Dir(home)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tfconfig, _ := filepath.Abs("testdata/apps/tfconfig.py")
	r, err := app.ParseRegistry(fmt.Appendf(nil, `{"applications":{"tfconfig_box":{"argv":[%q,%q],"env":["TRAINFLOW_TEST_PASSED"],"sandbox":true}}}`, debianPython, tfconfig), "")
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]func(*stackConfig){func(c *stackConfig) { c.Trust.allowPackages, c.Trust.applications = allow, r }}, opts...)
	return testStack(t, home, opts...), home
}

// TestPackageJob submits the user's own Python package on a worker started
// with --allow-packages: a config.yaml naming a local package
// (trainingInput.packageUris, pythonModule, args) on a CUSTOM cluster of a
// chief and 2 workers, and `--package-path` with a dependency no index
// has. Each replica of the first installs the package into its own
// virtual environment and runs the module in the sandbox with the exact
// TF_CONFIG of the seeds' format (python_module in place of the
// application), its args verbatim; it cannot read a sibling job's
// directory nor see the worker's environment. The second fails, not
// retried, with pip's own message in the job's error. A registered
// application with "sandbox": true runs in the same sandbox, its script
// bound read-only, the operator's pass-through variable alone reaching it.
func TestPackageJob(t *testing.T) {
	st, home := packageStack(t, true)
	addr := st.Temporal.FrontendAddr()
	t.Setenv("TRAINFLOW_TEST_SECRET", "s3cret")
	t.Setenv("TRAINFLOW_TEST_PASSED", "passed")
	sibling := filepath.Join(home, "jobs", "sibling", "secret.txt")
	if err := os.MkdirAll(filepath.Dir(sibling), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sibling, []byte("sibling's data"), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, _ := filepath.Abs("testdata/pkg/trainer")
	args := []string{"--x=1", "a b", "$(id)", "--read=" + sibling}
	argsJSON, _ := json.Marshal(args)
	// packageUris relative to the config file's directory.
	dir := t.TempDir()
	for _, f := range []string{"__init__.py", "task.py"} {
		b, err := os.ReadFile(filepath.Join(pkg, f))
		if err == nil {
			err = os.MkdirAll(filepath.Join(dir, "pkg", "trainer"), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "pkg", "trainer", f), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(dir, "config.yaml")
	// Cloud ML Engine's runtime 1.15 named the chief master in TF_CONFIG.
	if err := os.WriteFile(config, fmt.Appendf(nil, "trainingInput:\n  scaleTier: CUSTOM\n  workerCount: 2\n  packageUris: [pkg/trainer]\n  pythonModule: trainer.task\n  args: %s\n  region: us-central1\n  runtimeVersion: \"1.15\"\n", argsJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli(t, "jobs", "submit", "training", "pkg_custom", "--temporal", addr, "--config", config); code != exitOK {
		t.Fatalf("submit --config: exit %d: %s", code, errs)
	}
	if code, _, errs := cli(t, "jobs", "submit", "training", "pkg_nodep", "--temporal", addr,
		"--package-path", "testdata/pkgdep", "--module-name", "trainer.task", "--", "--epochs", "1"); code != exitOK {
		t.Fatalf("submit --package-path: exit %d: %s", code, errs)
	}

	boxed := startUIStyle(t, st.Client, "app_boxed", `{"job_id":"app_boxed","application":{"name":"tfconfig_box","args":["--read=x"]}}`)
	if _, err := waitJob(t, st.Client.GetWorkflow(context.Background(), "pkg_custom", "")); err != nil {
		t.Fatalf("pkg_custom: %v", err)
	}
	jobDir := filepath.Join(home, "jobs", "pkg_custom")
	// The archive is in the job directory, once, and in no replica's input.
	want, err := packagePath(pkg, "trainer.task")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(jobDir, filepath.FromSlash(jobdir.AppPackageFile))); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes, %v; want the packed archive (%d bytes)", jobdir.AppPackageFile, len(got), err, len(want))
	}
	replicas := 0
	for it := st.Client.GetWorkflowHistory(context.Background(), "pkg_custom", "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); it.HasNext(); {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == workflows.AppReplicaActivity {
			replicas++
			if in := string(a.GetInput().GetPayloads()[0].GetData()); strings.Contains(in, `"package"`) || !strings.Contains(in, `"module":"trainer.task"`) {
				t.Errorf("a replica's input carries the package: %.300s", in)
			}
		}
	}
	if replicas != 3 {
		t.Errorf("%d replicas scheduled, want 3", replicas)
	}
	recordApp(t, st, "pkg_custom", "application_package", inputProof(`"package":`))
	p := appProgress(t, st, "pkg_custom")
	if p.Phase != workflows.PhaseSucceeded || p.AppCluster == nil || len(p.AppCluster.Replicas) != 3 {
		t.Fatalf("pkg_custom: progress %+v", p)
	}
	addrs := map[string][]string{}
	for _, r := range p.AppCluster.Replicas {
		addrs[r.Type] = append(addrs[r.Type], strconv.Quote(r.Addr))
	}
	cluster := `"master":[` + addrs["chief"][0] + `],"worker":[` + strings.Join(addrs["worker"], ",") + `]`
	for _, r := range p.AppCluster.Replicas {
		name := fmt.Sprintf("%s-%d", r.Type, r.Index)
		log := replicaLog(t, jobDir, name)
		typ := r.Type
		if typ == "chief" {
			typ = "master"
		}
		want := fmt.Sprintf(`{"cluster":{%s},"task":{"type":%q,"index":%d,"trial":""},"job":{"scale_tier":"CUSTOM","worker_count":"2","parameter_server_count":"0","package_uris":["pkg/trainer"],"python_module":"trainer.task","args":%s,"job_dir":%q,"region":"us-central1","runtime_version":"1.15"},"environment":"cloud"}`,
			cluster, typ, r.Index, argsJSON, jobDir)
		if got := line(log, "TF_CONFIG"); got != want {
			t.Errorf("%s TF_CONFIG:\n got %s\nwant %s", name, got, want)
		}
		if got := line(log, "ARGS"); got != string(argsJSON) {
			t.Errorf("%s argv %s, want %s verbatim", name, got, argsJSON)
		}
		venv := filepath.Join(jobDir, filepath.FromSlash(jobdir.AppPackageWork(name)), "venv", "bin", "python")
		if got := line(log, "PYTHON"); got != venv {
			t.Errorf("%s ran %s, want its own virtual environment's %s", name, got, venv)
		}
		if got := line(log, "READ"); got != "FileNotFoundError" {
			t.Errorf("%s read the sibling job's file: READ=%s, want FileNotFoundError (not in its sandbox)", name, got)
		}
		if got := line(log, "SECRET"); got != "<unset>" {
			t.Errorf("%s: the worker's environment leaked: TRAINFLOW_TEST_SECRET=%s", name, got)
		}
	}

	if _, err := waitJob(t, boxed); err != nil {
		t.Fatalf("app_boxed: %v", err)
	}
	log := replicaLog(t, filepath.Join(home, "jobs", "app_boxed"), "chief-0")
	if !strings.Contains(line(log, "TF_CONFIG"), `"application":"tfconfig_box"`) || line(log, "SECRET") != "<unset>" || line(log, "PASSED") != "passed" {
		t.Errorf("app_boxed: log %s", log)
	}
	// The file the program wrote is the sandbox's user's: it ran there.
	if st, err := os.Stat(filepath.Join(home, "jobs", "app_boxed", "model", "chief-0.done")); err != nil {
		t.Error(err)
	} else if uid := st.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && uid != 65534 {
		t.Errorf("app_boxed: its file is uid %d's, want the sandbox's nobody (65534)", uid)
	}

	_, err = waitJob(t, st.Client.GetWorkflow(context.Background(), "pkg_nodep", ""))
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeAppFailed || !ae.NonRetryable() ||
		!strings.Contains(err.Error(), "No matching distribution found for trainflow-no-such-dependency") {
		t.Errorf("pkg_nodep: %v; want a non-retryable %s error with pip's message", err, workflows.ErrTypeAppFailed)
	}
}

// TestPackageRefused: a package job on a worker started without
// --allow-packages fails, not retried, as InvalidSpec naming
// application.package and the flag, before anything is installed or run.
func TestPackageRefused(t *testing.T) {
	st, home := packageStack(t, false)
	archive, err := packagePath("testdata/pkg/trainer", "trainer.task")
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitJob(t, startUIStyle(t, st.Client, "pkg_refused", fmt.Sprintf(`{"job_id":"pkg_refused","application":{"package":%q,"module":"trainer.task"}}`,
		base64.StdEncoding.EncodeToString(archive))))
	if !workflows.IsInvalidSpec(err) || !strings.Contains(err.Error(), "application.package") || !strings.Contains(err.Error(), "--allow-packages") {
		t.Errorf("%v, want InvalidSpec naming application.package and --allow-packages", err)
	}
	if _, err := os.Stat(filepath.Join(home, "jobs", "pkg_refused", filepath.FromSlash(jobdir.AppPackageDir))); err == nil {
		t.Errorf("a replica installed the package")
	}
}
