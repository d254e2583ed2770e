package jobs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobspec"
)

// predictionInputFields are the PredictionInput fields
// FromPredictionInput knows, for its suggestions.
var predictionInputFields = []string{"dataFormat", "outputDataFormat", "inputPaths", "outputPath", "maxWorkerCount", "region",
	"runtimeVersion", "modelName", "versionName", "uri", "batchSize", "signatureName", "accelerator"}

// FromPredictionInput maps a Cloud ML Engine PredictionInput (an ml/v1
// Job's predictionInput) onto a PredictionSpec without a job ID: what
// applies is used, what does not comes back as warnings. modelName
// ("projects/P/models/M" or "M") and versionName (".../models/M/versions/N",
// N a trainflow version number) name a model of the workers' repository;
// uri names an export bundle directory. dataFormat JSON or TEXT reads
// JSONL, CSV reads CSV. Errors name the field as predictionInput.FIELD.
func FromPredictionInput(raw json.RawMessage) (jobspec.PredictionSpec, []string, error) {
	var spec jobspec.PredictionSpec
	var in map[string]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil || in == nil {
		return spec, nil, fmt.Errorf("predictionInput: want an object of PredictionInput fields")
	}
	var warn []string
	str := func(k string) (string, error) {
		var s string
		if err := json.Unmarshal(in[k], &s); err != nil {
			return "", fmt.Errorf("predictionInput.%s: want a string", k)
		}
		return s, nil
	}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		var err error
		switch k {
		case "dataFormat":
			var f string
			if f, err = str(k); err != nil {
				break
			}
			switch f {
			case "JSON", "TEXT":
				spec.DataFormat = "JSONL"
			case "CSV":
				spec.DataFormat = "CSV"
			default:
				err = fmt.Errorf("predictionInput.dataFormat %q: want JSON, TEXT or CSV (TF_RECORD is not read here)", f)
			}
		case "outputDataFormat":
			var f string
			if f, err = str(k); err == nil && f != "JSON" && f != "DATA_FORMAT_UNSPECIFIED" {
				err = fmt.Errorf("predictionInput.outputDataFormat %q: want JSON (trainflow writes JSON lines)", f)
			}
		case "inputPaths":
			if json.Unmarshal(in[k], &spec.InputPaths) != nil || len(spec.InputPaths) == 0 {
				err = fmt.Errorf("predictionInput.inputPaths: want a list of paths or globs")
			}
		case "outputPath":
			spec.OutputPath, err = str(k)
		case "uri":
			spec.ModelDir, err = str(k)
		case "modelName":
			var s string
			if s, err = str(k); err == nil && spec.Model == "" {
				spec.Model = lastName(s, "models")
			}
		case "versionName":
			var s string
			if s, err = str(k); err != nil {
				break
			}
			m, v, ok := strings.Cut(s, "/versions/")
			n, perr := strconv.ParseInt(v, 10, 64)
			switch {
			case ok && perr == nil && n > 0:
				spec.Model, spec.Version = lastName(m, "models"), n
			case ok && ident.Valid(v): // the name versions.create gave it
				spec.Model, spec.VersionLabel = lastName(m, "models"), v
			default:
				err = fmt.Errorf("predictionInput.versionName %q: want projects/P/models/M/versions/V, V a version's name or number", s)
			}
		case "maxWorkerCount":
			var n json.Number
			var v int64
			if json.Unmarshal(in[k], &n) != nil {
				err = fmt.Errorf("predictionInput.maxWorkerCount: want an integer")
			} else if v, err = n.Int64(); err != nil || v < 0 {
				err = fmt.Errorf("predictionInput.maxWorkerCount %s: want an integer ≥ 0", n)
			}
			spec.MaxWorkerCount = int(v)
		case "signatureName":
			var s string
			if s, err = str(k); err == nil && s != "" && s != "serving_default" {
				err = fmt.Errorf("predictionInput.signatureName %q: trainflow's bundles have one signature, serving_default", s)
			}
		case "batchSize", "region", "runtimeVersion", "accelerator":
			warn = append(warn, fmt.Sprintf("%s: does not apply to trainflow; ignored", k))
		default:
			err = fmt.Errorf("predictionInput.%s: unknown field%s", k, jobspec.Suggest(k, predictionInputFields))
		}
		if err != nil {
			return spec, nil, err
		}
	}
	return spec, warn, nil
}

// lastName is the name after "kind/" in a resource name such as
// projects/P/models/M, or s itself when it has no such segment.
func lastName(s, kind string) string {
	if i := strings.LastIndex(s, kind+"/"); i >= 0 {
		return s[i+len(kind)+1:]
	}
	return s
}
