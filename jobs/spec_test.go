package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobspec"
)

func TestLoadSpecFixtures(t *testing.T) {
	good := map[string]struct {
		check    func(jobspec.JobSpec) bool
		warnings []string
	}{
		"good_mlengine.yaml": {
			check: func(s jobspec.JobSpec) bool {
				return s.Preset == "census" && s.JobDir == "/tmp/census-job" && s.Train.MaxSteps == 1200 && s.Model.LearningRate == 0.01 && s.Model.BatchSize == 128
			},
			warnings: []string{"args: --verbosity", "hyperparameters: no params", "pythonVersion", "region", "runtimeVersion"},
		},
		"good_mlengine_standard.yaml": {
			check: func(s jobspec.JobSpec) bool {
				d := s.WithDefaults()
				return s.Preset == "census" && d.Cluster.ScaleTier == jobspec.TierStandard1 && d.Cluster.Workers() == 5 && d.Cluster.ParameterServerCount == 3
			},
		},
		"good_native.yaml": {check: func(s jobspec.JobSpec) bool {
			return s.Data.GeneratedRows == 5000 && s.Model.LearningRate == 0.005 && s.Train.MaxSteps == 800
		}},
		"good_mlengine_hptuning.yaml": {check: func(s jobspec.JobSpec) bool {
			t := s.Tuning
			return t != nil && t.MaxTrials == 8 && t.MaxParallelTrials == 2 && t.EnableTrialEarlyStopping && t.Algorithm == jobspec.AlgorithmRandom &&
				len(t.Params) == 3 && t.Params[0].ParameterName == "model.learning_rate" && t.Params[0].ScaleType == jobspec.ScaleLog &&
				t.Params[1].ParameterName == "model.batch_size" && len(t.Params[1].DiscreteValues) == 3 && t.Params[2].CategoricalValues[1] == "dnn_classifier"
		}},
		"good_native.json": {check: func(s jobspec.JobSpec) bool { return s.ModelName == "census_small" && s.Train.MaxSteps == 500 }},
	}
	for name, want := range good {
		t.Run(name, func(t *testing.T) {
			b, _ := os.ReadFile(filepath.Join("testdata", "config", name))
			spec, warnings, err := LoadSpec(b)
			if err != nil {
				t.Fatal(err)
			}
			if !want.check(spec) {
				t.Fatalf("spec %+v does not map the file", spec)
			}
			if len(warnings) != len(want.warnings) {
				t.Fatalf("warnings %q, want %d about %q", warnings, len(want.warnings), want.warnings)
			}
			for i, w := range want.warnings {
				if !strings.Contains(warnings[i], w) {
					t.Errorf("warning %d = %q, want it about %q", i, warnings[i], w)
				}
			}
			d := spec.WithDefaults()
			d.JobID = "fixture_1"
			if err := d.Validate(); err != nil {
				t.Errorf("mapped spec invalid: %v", err)
			}
		})
	}
	bad := map[string]string{
		"bad_unknown_field.yaml":       "trian: unknown field (did you mean train?)",
		"bad_scale_tier.yaml":          `scaleTier "ENORMOUS"`,
		"bad_args.yaml":                `--train-steps="many"`,
		"bad_trainingInput_field.yaml": "trainingInput.scaleTeir: unknown field",
		"bad_not_yaml.yaml":            "not YAML or JSON",
		"bad_hptuning_param.yaml":      `trainingInput.hyperparameters.params[0].max_vlaue: unknown field (did you mean max_value?)`,
	}
	for name, want := range bad {
		t.Run(name, func(t *testing.T) {
			b, _ := os.ReadFile(filepath.Join("testdata", "config", name))
			if _, _, err := LoadSpec(b); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadSpec error %v, want one mentioning %q", err, want)
			}
		})
	}
}

// TestFlagFieldsAreTunable: every JobSpec path a trainer flag maps to
// (flagFields) is one a tuning parameter may name (jobspec.IsTunable),
// so a config.yaml that tunes --learning-rate, say, becomes a spec that
// validates; and the check refuses a path that is not.
func TestFlagFieldsAreTunable(t *testing.T) {
	if len(flagFields) == 0 {
		t.Fatal("flagFields is empty")
	}
	for flag, path := range flagFields {
		if !jobspec.IsTunable(path) {
			t.Errorf("flag %s maps to %q, which is not a tunable field of jobspec", flag, path)
		}
	}
	for _, path := range []string{"model.learning_rat", "model.hidden_units[8]", "job_id"} {
		if jobspec.IsTunable(path) {
			t.Errorf("IsTunable(%q) = true, want false", path)
		}
	}
}

// TestTrainerPackagesAreNotCensus: a config.yaml naming a trainer package
// or a container image is refused with a clear error, never run as the
// census preset.
func TestTrainerPackagesAreNotCensus(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"trainingInput:\n  pythonModule: trainer.task\n  packageUris: [gs://b/trainer-0.1.tar.gz]\n", "trainingInput.packageUris: a Python trainer package"},
		{"trainingInput:\n  pythonModule: trainer.task\n", "trainingInput.pythonModule: a Python trainer package"},
		{"trainingInput:\n  masterConfig:\n    imageUri: gcr.io/p/trainer:1\n", "trainingInput.masterConfig.imageUri \"gcr.io/p/trainer:1\": custom containers need a container runtime"},
	} {
		spec, _, err := LoadSpec([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: spec %+v, error %v; want an error containing %q", tc.yaml, spec.Preset, err, tc.want)
		}
	}
	if _, warn, err := LoadSpec([]byte("trainingInput:\n  masterConfig:\n    acceleratorConfig: {count: 1}\n")); err != nil || len(warn) != 1 {
		t.Errorf("masterConfig without imageUri: %v, warnings %q", err, warn)
	}
}

// TestTrainerPackageConfig: with a package loader (the CLI's), a
// config.yaml naming a trainer package becomes a package job: the one
// package URI loaded, pythonModule the module, args the trainer's,
// verbatim (not census flags); several packages are refused naming the
// field (the loader refuses what it cannot read: the CLI's, object
// storage), and a container image stays refused.
func TestTrainerPackageConfig(t *testing.T) {
	var loaded []string
	load := func(uri, module string) ([]byte, error) {
		loaded = append(loaded, uri+" "+module)
		return []byte("archive"), nil
	}
	spec, _, err := LoadSpecPackages([]byte("trainingInput:\n  scaleTier: CUSTOM\n  workerCount: 2\n  packageUris: [./trainer]\n  pythonModule: trainer.task\n  args: [--train-steps, '10', $(id)]\n"), load)
	if err != nil {
		t.Fatal(err)
	}
	a := spec.Application
	if a == nil || string(a.Package) != "archive" || a.Module != "trainer.task" || strings.Join(a.Args, " ") != "--train-steps 10 $(id)" ||
		spec.Preset != "" || spec.Cluster.WorkerCount != 2 || strings.Join(loaded, ",") != "./trainer trainer.task" {
		t.Fatalf("spec %+v application %+v loaded %q", spec, a, loaded)
	}
	spec.JobID = "pkg"
	if d := spec.WithDefaults(); d.Validate() != nil {
		t.Fatalf("mapped spec: %v", d.Validate())
	}
	// Tuning a package: a parameter is the package's own flag, as the
	// trials pass it (--learning-rate=V), not the census model's field.
	tuned, _, err := LoadSpecPackages([]byte("trainingInput:\n  packageUris: [./trainer]\n  pythonModule: trainer.task\n"+
		"  hyperparameters:\n    goal: MAXIMIZE\n    hyperparameterMetricTag: accuracy\n    maxTrials: 4\n"+
		"    params:\n    - parameterName: learning-rate\n      type: DOUBLE\n      minValue: 0.001\n      maxValue: 0.1\n"), load)
	if err != nil {
		t.Fatal(err)
	}
	if tuned.Tuning == nil || len(tuned.Tuning.Params) != 1 || tuned.Tuning.Params[0].ParameterName != "learning-rate" {
		t.Fatalf("a package's tuned flag: %+v, want parameter learning-rate", tuned.Tuning)
	}
	tuned.JobID = "pkg_tune"
	if d := tuned.WithDefaults(); d.Validate() != nil {
		t.Fatalf("a package's tuning spec: %v, want valid", d.Validate())
	}
	// The census sample's flag still tunes the built-in model's field.
	census, _, err := LoadSpec([]byte("trainingInput:\n  hyperparameters:\n    goal: MAXIMIZE\n    maxTrials: 4\n" +
		"    params:\n    - parameterName: learning-rate\n      type: DOUBLE\n      minValue: 0.001\n      maxValue: 0.1\n"))
	if err != nil || census.Tuning == nil || census.Tuning.Params[0].ParameterName != "model.learning_rate" {
		t.Fatalf("the census sample's tuned flag: %+v, %v; want model.learning_rate", census.Tuning, err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"trainingInput:\n  pythonModule: trainer.task\n  packageUris: [a.tar.gz, b.tar.gz]\n", "trainingInput.packageUris: want a list of one package"},
		{"trainingInput:\n  packageUris: [a.tar.gz]\n", "trainingInput.pythonModule"},
		{"trainingInput:\n  masterConfig:\n    imageUri: gcr.io/p/trainer:1\n", "custom containers need a container runtime"},
	} {
		if _, _, err := LoadSpecPackages([]byte(tc.yaml), load); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

// TestPackageRuntimeFields: a package job's region, runtimeVersion and
// pythonVersion are recorded for its TF_CONFIG.job beside the package
// URIs as named; a runtime before 2.1 names the chief master (Cloud ML
// Engine's), unless useChiefInTfConfig; a runtime version that is none
// is refused naming the field. For the census model they do not apply
// and are warned about.
func TestPackageRuntimeFields(t *testing.T) {
	load := func(uri, module string) ([]byte, error) { return []byte("archive"), nil }
	const pkg = "trainingInput:\n  packageUris: [t.tar.gz]\n  pythonModule: trainer.task\n"
	for _, tc := range []struct{ extra, chief string }{
		{"  runtimeVersion: '1.15'\n  region: us-central1\n  pythonVersion: '3.7'\n", "master"},
		{"  runtimeVersion: '2.0'\n", "master"},
		{"  runtimeVersion: '2.1'\n", ""},
		{"  runtimeVersion: '2.11'\n", ""},
		{"  runtimeVersion: '1.15'\n  useChiefInTfConfig: true\n", "chief"},
		{"", ""},
	} {
		spec, _, err := LoadSpecPackages([]byte(pkg+tc.extra), load)
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		a := spec.Application
		if a.TFConfigChief != tc.chief || a.Origin == nil || strings.Join(a.Origin.PackageURIs, ",") != "t.tar.gz" {
			t.Errorf("%q: chief %q, origin %+v; want chief %q and the package URI", tc.extra, a.TFConfigChief, a.Origin, tc.chief)
		}
		spec.JobID = "pkg"
		if d := spec.WithDefaults(); d.Validate() != nil {
			t.Errorf("%q: %v", tc.extra, d.Validate())
		}
	}
	spec, _, err := LoadSpecPackages([]byte("trainingInput:\n  packageUris: [t.tar.gz]\n  pythonModule: trainer.task\n  runtimeVersion: '1.15'\n  region: us-central1\n  pythonVersion: '3.7'\n"), load)
	if o := spec.Application.Origin; err != nil || o.Region != "us-central1" || o.RuntimeVersion != "1.15" || o.PythonVersion != "3.7" {
		t.Errorf("recorded %+v, %v", o, err)
	}
	if _, _, err := LoadSpecPackages([]byte(pkg+"  runtimeVersion: latest\n"), load); err == nil || !strings.Contains(err.Error(), "trainingInput.runtimeVersion \"latest\"") {
		t.Errorf("runtimeVersion latest: %v", err)
	}
	census, warn, err := LoadSpec([]byte("trainingInput:\n  region: us-central1\n  runtimeVersion: '1.15'\n  useChiefInTfConfig: true\n"))
	if err != nil || census.Application != nil || len(warn) != 3 {
		t.Errorf("census with runtime fields: %+v, warnings %q, %v; want three warnings", census.Application, warn, err)
	}
}

// TestOverlayTrainingInput: gcloud's flags replace the config's fields
// and keep the others; without a config they are the whole input.
func TestOverlayTrainingInput(t *testing.T) {
	b, err := OverlayTrainingInput([]byte("jobId: x\ntrainingInput:\n  scaleTier: BASIC\n  args: [--train-steps, '10']\n"), map[string]any{"scaleTier": "CUSTOM", "workerCount": 2})
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := LoadSpec(b)
	if err != nil || spec.Cluster.ScaleTier != "CUSTOM" || spec.Cluster.WorkerCount != 2 || spec.Train.MaxSteps != 10 {
		t.Errorf("%s: %+v %+v, %v", b, spec.Cluster, spec.Train, err)
	}
	if b, err = OverlayTrainingInput(nil, map[string]any{"jobDir": "/x"}); err != nil || string(b) != `{"trainingInput":{"jobDir":"/x"}}` {
		t.Errorf("no config: %s, %v", b, err)
	}
	if fields, ok := TrainingInputFields([]byte("trainingInput:\n  packageUris: [a]\n  args: []\n")); !ok || strings.Join(fields, ",") != "args,packageUris" {
		t.Errorf("fields %q, %v", fields, ok)
	}
	if _, ok := TrainingInputFields([]byte(`{"job_id":"x"}`)); ok {
		t.Error("a JobSpec taken for a config.yaml")
	}
}
