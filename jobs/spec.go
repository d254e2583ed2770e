package jobs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/jobspec"
	"sigs.k8s.io/yaml"
)

// LoadSpec reads a job file: a Cloud ML Engine config (top-level
// trainingInput) or a native JobSpec, JSON or YAML. Unknown JobSpec fields
// are errors; ML Engine fields that do not apply come back as warnings.
func LoadSpec(data []byte) (spec jobspec.JobSpec, warnings []string, err error) {
	return LoadSpecPackages(data, nil)
}

// PackageLoader returns the archive of a trainer package a config.yaml's
// trainingInput.packageUris names, checked to hold module (pythonModule).
type PackageLoader func(uri, module string) ([]byte, error)

// LoadSpecPackages is LoadSpec where a config.yaml may name a trainer
// package (trainingInput.packageUris, pythonModule, args): load turns the
// one package URI into the archive of the spec's application.package,
// pythonModule becomes application.module and args its args, verbatim.
// With load nil such a config is refused, as LoadSpec refuses it.
func LoadSpecPackages(data []byte, load PackageLoader) (spec jobspec.JobSpec, warnings []string, err error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return spec, nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(js, &probe); err != nil {
		return spec, nil, fmt.Errorf("want an object: %w", err)
	}
	if _, ok := probe["trainingInput"]; ok {
		return FromTrainingInput(probe["trainingInput"], load)
	}
	// The workflow decodes what it is sent by the same rules.
	spec, err = jobspec.DecodeSpec(js)
	return spec, nil, err
}

// TrainingInputFields returns the fields of a job file's trainingInput,
// and whether it is a Cloud ML Engine config (a top-level trainingInput)
// rather than a JobSpec.
func TrainingInputFields(data []byte) ([]string, bool) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(js, &probe) != nil {
		return nil, false
	}
	raw, ok := probe["trainingInput"]
	var in map[string]json.RawMessage
	_ = json.Unmarshal(raw, &in) // not an object: FromTrainingInput says so
	return slices.Sorted(maps.Keys(in)), ok
}

// OverlayTrainingInput returns a Cloud ML Engine config (JSON): data's
// (a config.yaml; nil: none) with the trainingInput fields of set in
// place of its own, as gcloud's flags override a --config file's.
func OverlayTrainingInput(data []byte, set map[string]any) ([]byte, error) {
	doc := map[string]json.RawMessage{}
	in := map[string]json.RawMessage{}
	if data != nil {
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("not YAML or JSON: %w", err)
		}
		if err := json.Unmarshal(js, &doc); err != nil {
			return nil, fmt.Errorf("want an object: %w", err)
		}
		if raw, ok := doc["trainingInput"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &in); err != nil {
				return nil, fmt.Errorf("trainingInput: want an object of TrainingInput fields")
			}
		}
	}
	for k, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		in[k] = b
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	doc["trainingInput"] = b
	return json.Marshal(doc)
}

// FromTrainingInput maps a Cloud ML Engine TrainingInput (the JSON
// object of a config.yaml's trainingInput, or of an ml/v1 Job's) onto a
// JobSpec without a job ID: what applies is used, the rest comes back as
// warnings. load reads a trainer package as LoadSpecPackages says (nil:
// packages are refused). It is the one mapping: `jobs submit training
// --config` and the ml/v1 REST API both call it. Errors name the field
// as trainingInput.FIELD.
func FromTrainingInput(raw json.RawMessage, load PackageLoader) (jobspec.JobSpec, []string, error) {
	var in map[string]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil {
		return jobspec.JobSpec{}, nil, fmt.Errorf("trainingInput: want an object of TrainingInput fields")
	}
	return fromTrainingInput(in, load) // null: an empty object
}

// fromTrainingInput is FromTrainingInput of the decoded object.
func fromTrainingInput(in map[string]json.RawMessage, load PackageLoader) (jobspec.JobSpec, []string, error) {
	spec := jobspec.JobSpec{Preset: jobspec.PresetCensus}
	var warn []string
	_, hasURIs := in["packageUris"]
	_, hasModule := in["pythonModule"]
	pkg := load != nil && (hasURIs || hasModule)
	if pkg {
		a, err := trainerPackage(in, load)
		if err != nil {
			return spec, nil, err
		}
		spec.Preset, spec.Application = "", a
	}
	str := func(k string) (string, error) {
		var s string
		if err := json.Unmarshal(in[k], &s); err != nil {
			return "", fmt.Errorf("trainingInput.%s: want a string: %w", k, err)
		}
		return s, nil
	}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		switch k {
		case "scaleTier":
			tier, err := str(k)
			if err != nil {
				return spec, nil, err
			}
			switch tier {
			case "BASIC", "STANDARD_1", "PREMIUM_1", "CUSTOM":
				spec.Cluster.ScaleTier = tier
			case "BASIC_GPU", "BASIC_TPU":
				warn = append(warn, fmt.Sprintf("scaleTier %s: no accelerators here; running BASIC (one worker)", tier))
			default:
				return spec, nil, fmt.Errorf("trainingInput.scaleTier %q: want BASIC, STANDARD_1, PREMIUM_1 or CUSTOM", tier)
			}
		case "workerCount", "parameterServerCount":
			var n json.Number
			if err := json.Unmarshal(in[k], &n); err != nil {
				return spec, nil, fmt.Errorf("trainingInput.%s: want a number: %w", k, err)
			}
			v, err := n.Int64()
			if err != nil {
				return spec, nil, fmt.Errorf("trainingInput.%s: want an integer: %w", k, err)
			}
			if k == "workerCount" {
				spec.Cluster.WorkerCount = int(v)
			} else {
				spec.Cluster.ParameterServerCount = int(v)
			}
		case "evaluatorCount":
			var n int
			if err := json.Unmarshal(in[k], &n); err != nil {
				return spec, nil, fmt.Errorf("trainingInput.%s: want an integer: %w", k, err)
			}
			on := n > 0
			spec.Cluster.Evaluator = &on
		case "masterConfig", "workerConfig", "parameterServerConfig", "evaluatorConfig":
			var rc struct {
				ImageURI string `json:"imageUri"`
			}
			if err := json.Unmarshal(in[k], &rc); err != nil {
				return spec, nil, fmt.Errorf("trainingInput.%s: want an object: %w", k, err)
			}
			if rc.ImageURI != "" {
				return spec, nil, fmt.Errorf("trainingInput.%s.imageUri %q: custom containers need a container runtime, which trainflow workers do not have; run the trainer as a registered application instead (docs/applications.md)", k, rc.ImageURI)
			}
			warn = append(warn, fmt.Sprintf("%s: machine types do not apply (every trainflow worker process can run any role); ignored", k))
		case "packageUris", "pythonModule":
			if pkg {
				continue // trainerPackage
			}
			// A trainer package is the user's own program: never train the
			// census preset in its place.
			return spec, nil, fmt.Errorf("trainingInput.%s: a Python trainer package is the user's own program; submit it with `trainflow jobs submit training --config FILE` (a local package in packageUris, workers started with --allow-packages; docs/sandbox.md), or register it (worker --applications, docs/applications.md) and submit a JobSpec with \"application\": {\"name\": NAME, \"args\": [...]}", k)
		case "masterType", "workerType", "parameterServerType", "evaluatorType":
			warn = append(warn, fmt.Sprintf("%s: machine types do not apply (every trainflow worker process can run any role); ignored", k))
		case "jobDir":
			s, err := str(k)
			if err != nil {
				return spec, nil, err
			}
			spec.JobDir = s
		case "args":
			if pkg {
				continue // the trainer's own: trainerPackage
			}
			var args []string
			if err := json.Unmarshal(in[k], &args); err != nil {
				return spec, nil, fmt.Errorf("trainingInput.args: want a list of strings: %w", err)
			}
			w, err := applyArgs(&spec, args)
			if err != nil {
				return spec, nil, err
			}
			warn = append(warn, w...)
		case "hyperparameters":
			t, err := fromHyperparameters(in[k], pkg)
			if err != nil {
				return spec, nil, err
			}
			if len(t.Params) == 0 {
				warn = append(warn, "hyperparameters: no params to tune; running a single training job")
				continue
			}
			spec.Tuning = t
		case "region", "runtimeVersion", "pythonVersion":
			v, err := str(k)
			if err != nil {
				return spec, nil, err
			}
			if !pkg {
				warn = append(warn, fmt.Sprintf("%s: does not apply to trainflow; ignored", k))
				continue
			}
			// A package's program reads them in TF_CONFIG.job.
			o := spec.Application.Origin
			switch k {
			case "region":
				o.Region = v
			case "runtimeVersion":
				master, err := masterRuntime(v)
				if err != nil {
					return spec, nil, err
				}
				if master && spec.Application.TFConfigChief == "" {
					spec.Application.TFConfigChief = "master"
				}
				o.RuntimeVersion = v
			default:
				o.PythonVersion = v
			}
		case "useChiefInTfConfig":
			var b bool
			if err := json.Unmarshal(in[k], &b); err != nil {
				return spec, nil, fmt.Errorf("trainingInput.%s: want true or false: %w", k, err)
			}
			if !pkg {
				warn = append(warn, fmt.Sprintf("%s: only a trainer package's TF_CONFIG names its chief; ignored", k))
				continue
			}
			// Keys are read sorted: this overrides runtimeVersion's choice.
			if b {
				spec.Application.TFConfigChief = "chief"
			}
		case "scheduling", "network", "serviceAccount":
			warn = append(warn, fmt.Sprintf("%s: does not apply to trainflow; ignored", k))
		default:
			return spec, nil, fmt.Errorf("trainingInput.%s: unknown field%s", k, jobspec.Suggest(k, trainingInputFields))
		}
	}
	return spec, warn, nil
}

// masterRuntime reports whether Cloud ML Engine's runtime version v
// named the chief "master" in TF_CONFIG (versions before 2.1).
func masterRuntime(v string) (bool, error) {
	maj, min, ok := strings.Cut(v, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(strings.SplitN(min, ".", 2)[0])
	if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 {
		return false, fmt.Errorf("trainingInput.runtimeVersion %q: want a runtime version such as 2.11 or 1.15", v)
	}
	return a < 2 || (a == 2 && b < 1), nil
}

// trainingInputFields are the TrainingInput fields fromTrainingInput
// knows, for its suggestions.
var trainingInputFields = []string{"scaleTier", "workerCount", "parameterServerCount", "evaluatorCount", "masterConfig", "workerConfig",
	"parameterServerConfig", "evaluatorConfig", "packageUris", "pythonModule", "masterType", "workerType", "parameterServerType",
	"evaluatorType", "jobDir", "args", "hyperparameters", "region", "runtimeVersion", "pythonVersion", "scheduling", "network",
	"serviceAccount", "useChiefInTfConfig"}

// applyArgs maps the census sample's trainer flags onto the spec.
func applyArgs(spec *jobspec.JobSpec, args []string) ([]string, error) {
	var warn []string
	for i := 0; i < len(args); i++ {
		name, val, ok := strings.Cut(args[i], "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			val, i = args[i+1], i+1
		}
		name = strings.ReplaceAll(strings.TrimLeft(name, "-"), "_", "-")
		num := func() (int64, error) {
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("trainingInput.args: --%s=%q: want a positive integer", name, val)
			}
			return n, nil
		}
		var err error
		switch name {
		case "train-steps", "max-steps":
			spec.Train.MaxSteps, err = num()
		case "train-batch-size", "batch-size":
			var n int64
			n, err = num()
			spec.Model.BatchSize = int(n)
		case "learning-rate":
			spec.Model.LearningRate, err = strconv.ParseFloat(val, 64)
			if err != nil || spec.Model.LearningRate <= 0 {
				err = fmt.Errorf("trainingInput.args: --learning-rate=%q: want a positive number", val)
			}
		case "train-files":
			spec.Data.Train = strings.Split(val, ",")
		case "eval-files":
			spec.Data.Eval = strings.Split(val, ",")
		case "job-dir":
			spec.JobDir = val
		default:
			warn = append(warn, fmt.Sprintf("args: --%s is not a trainflow option; ignored", name))
		}
		if err != nil {
			return nil, err
		}
	}
	return warn, nil
}

// fromHyperparameters maps Cloud ML Engine's HyperparameterSpec
// (camelCase keys) onto a TuningSpec. A parameterName may be a JobSpec
// path (model.learning_rate) or one of the census sample's trainer flags
// (learning-rate, train-batch-size, ...).
func fromHyperparameters(raw json.RawMessage, app bool) (*jobspec.TuningSpec, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("trainingInput.hyperparameters: %w", err)
	}
	b, _ := json.Marshal(snakeKeys(v))
	// The rules and messages of a job spec's (jobspec.DecodeStrict):
	// the key's path, and a suggestion for a typo.
	var t jobspec.TuningSpec
	if err := jobspec.DecodeStrict(b, &t); err != nil {
		msg := strings.TrimPrefix(err.Error(), jobspec.ErrInvalid.Error()+": ")
		return nil, fmt.Errorf("%w: trainingInput.hyperparameters.%s", jobspec.ErrInvalid, msg)
	}
	if app {
		// A package's parameter is its own flag (--learning-rate=V on
		// each trial's command line), never a built-in model's field.
		return &t, nil
	}
	for i, p := range t.Params {
		if path, ok := flagFields[strings.ReplaceAll(strings.TrimLeft(p.ParameterName, "-"), "_", "-")]; ok {
			t.Params[i].ParameterName = path
		}
	}
	return &t, nil
}

// flagFields maps trainer flags, as hyperparameter names, to JobSpec paths.
var flagFields = map[string]string{
	"learning-rate": "model.learning_rate", "train-batch-size": "model.batch_size", "batch-size": "model.batch_size",
	"train-steps": "train.max_steps", "max-steps": "train.max_steps", "dropout": "model.dropout", "optimizer": "model.optimizer",
	"hidden-units": "model.hidden_units", "first-layer-size": "model.hidden_units[0]", "l1": "model.l1", "l2": "model.l2",
	"model-type": "model.type",
}

// snakeKeys rewrites object keys from camelCase to snake_case, at every
// depth (values are left alone).
func snakeKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			var sb strings.Builder
			for i, r := range k {
				if r >= 'A' && r <= 'Z' {
					if i > 0 {
						sb.WriteByte('_')
					}
					r += 'a' - 'A'
				}
				sb.WriteRune(r)
			}
			out[sb.String()] = snakeKeys(e)
		}
		return out
	case []any:
		for i := range x {
			x[i] = snakeKeys(x[i])
		}
	}
	return v
}

// trainerPackage is the application of a config.yaml naming a trainer
// package: one local package in packageUris, pythonModule, and args for
// the trainer, verbatim.
func trainerPackage(in map[string]json.RawMessage, load PackageLoader) (*jobspec.ApplicationSpec, error) {
	var uris []string
	var module string
	if err := json.Unmarshal(in["packageUris"], &uris); err != nil || len(uris) != 1 {
		return nil, fmt.Errorf("trainingInput.packageUris: want a list of one package (a .tar.gz, or a local directory for the CLI), got %s", in["packageUris"])
	}
	if err := json.Unmarshal(in["pythonModule"], &module); err != nil || module == "" {
		return nil, fmt.Errorf("trainingInput.pythonModule: want the module the package runs, e.g. trainer.task")
	}
	a := &jobspec.ApplicationSpec{Module: module, Origin: &jobspec.AppOrigin{PackageURIs: uris}}
	if raw, ok := in["args"]; ok {
		if err := json.Unmarshal(raw, &a.Args); err != nil {
			return nil, fmt.Errorf("trainingInput.args: want a list of strings: %w", err)
		}
	}
	b, err := load(uris[0], module)
	if err != nil {
		return nil, fmt.Errorf("trainingInput.packageUris %q: %w", uris[0], err)
	}
	a.Package = b
	return a, nil
}
