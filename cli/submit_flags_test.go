package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSubmitGcloudFlags: gcloud's `jobs submit training` flags are
// trainingInput fields through the one mapping: with --package-path they
// make a CUSTOM package job whose TF_CONFIG names the chief master for a
// runtime before 2.1 and records region and package path; over a
// config.yaml they override its fields and keep the rest (a tuned flag
// stays the package's); with a JobSpec, or a config naming its own
// package beside --package-path, they are refused naming the flag.
func TestSubmitGcloudFlags(t *testing.T) {
	sc, err := parseSubmit([]string{"--scale-tier", "CUSTOM", "--worker-count", "2", "--parameter-server-count", "1", "--region", "us-central1",
		"--runtime-version", "1.15", "--python-version", "3.7", "--package-path", "testdata/pkg/trainer", "--module-name", "trainer.task",
		"pkg_flags", "--", "--epochs", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := sc.spec.Application
	if c := sc.spec.Cluster; c.ScaleTier != "CUSTOM" || c.WorkerCount != 2 || c.ParameterServerCount != 1 || a == nil || a.Module != "trainer.task" ||
		a.TFConfigChief != "master" || strings.Join(a.Args, " ") != "--epochs 1" || a.Origin == nil ||
		strings.Join(a.Origin.PackageURIs, ",") != "testdata/pkg/trainer" || a.Origin.Region != "us-central1" || a.Origin.PythonVersion != "3.7" {
		t.Fatalf("cluster %+v application %+v origin %+v", c, a, a.Origin)
	}
	if sc, err = parseSubmit([]string{"--runtime-version", "1.15", "--use-chief-in-tf-config", "--package-path", "testdata/pkg/trainer", "--module-name", "trainer.task", "pkg_chief"}, io.Discard); err != nil || sc.spec.Application.TFConfigChief != "chief" {
		t.Fatalf("--use-chief-in-tf-config: %v", err)
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		if err := os.WriteFile(config, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("trainingInput:\n  scaleTier: STANDARD_1\n  jobDir: /tmp/x\n  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 2\n" +
		"    params:\n    - parameterName: learning-rate\n      type: DOUBLE\n      minValue: 0.001\n      maxValue: 0.1\n")
	sc, err = parseSubmit([]string{"--config", config, "--scale-tier", "BASIC", "--package-path", "testdata/pkg/trainer", "--module-name", "trainer.task", "pkg_tuned"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s := sc.spec; s.Cluster.ScaleTier != "BASIC" || s.JobDir != "/tmp/x" || s.Tuning == nil || s.Tuning.Params[0].ParameterName != "learning-rate" || s.Application == nil {
		t.Fatalf("over the config: cluster %+v job_dir %q tuning %+v", s.Cluster, s.JobDir, s.Tuning)
	}
	// The census preset, with a flag over the config.
	if sc, err = parseSubmit([]string{"--config", config, "--job-dir", "/tmp/y", "census_flags"}, io.Discard); err != nil || sc.spec.JobDir != "/tmp/y" ||
		sc.spec.Cluster.ScaleTier != "STANDARD_1" || sc.spec.Tuning.Params[0].ParameterName != "model.learning_rate" {
		t.Fatalf("census --job-dir: %+v, %v", sc, err)
	}

	for _, tc := range []struct {
		config string
		args   []string
		want   string
	}{
		{`{"job_id":"j","cluster":{"scale_tier":"BASIC"}}`, []string{"--worker-count", "2"}, "--worker-count: gcloud's flags go with a Cloud ML Engine config"},
		{"trainingInput:\n  packageUris: [x]\n  pythonModule: trainer.task\n", []string{"--package-path", "testdata/pkg/trainer", "--module-name", "trainer.task"}, "names its own trainer already"},
		{"", []string{"--scale-tier", "HUGE"}, "trainingInput.scaleTier \"HUGE\""},
		{"", []string{"--runtime-version", "latest", "--package-path", "testdata/pkg/trainer", "--module-name", "trainer.task"}, "trainingInput.runtimeVersion \"latest\""},
	} {
		args := tc.args
		if tc.config != "" {
			write(tc.config)
			args = append([]string{"--config", config}, args...)
		}
		if _, err := parseSubmit(append(args, "j"), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error containing %q", args, err, tc.want)
		}
	}
}
