package jobspec

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/tuning"
)

// TuningSpec is Cloud ML Engine's HyperparameterSpec in snake_case: what
// HyperparameterTuningJob searches and how. Every trial is a TrainingJob
// of the enclosing JobSpec with the trial's parameters applied.
type TuningSpec struct {
	// Goal is MAXIMIZE or MINIMIZE. Default: the metric's natural goal.
	Goal string `json:"goal,omitempty"`
	// HyperparameterMetricTag is the evaluation metric the trials are
	// compared on: accuracy (default), auc, log_loss, rmse or mae, of the
	// trial's final evaluation.
	HyperparameterMetricTag string `json:"hyperparameter_metric_tag,omitempty"`
	// MaxTrials bounds the trials run (default 10, at most 1000).
	MaxTrials int `json:"max_trials,omitempty"`
	// MaxParallelTrials bounds the trials running at once (default 1).
	MaxParallelTrials int `json:"max_parallel_trials,omitempty"`
	// MaxFailedTrials fails the tuning job once this many trials failed
	// (default: max_trials, so the job fails only if every trial fails).
	MaxFailedTrials int `json:"max_failed_trials,omitempty"`
	// EnableTrialEarlyStopping cancels a trial whose intermediate
	// evaluations fall behind (median stopping rule; see
	// HyperparameterTuningJob).
	EnableTrialEarlyStopping bool `json:"enable_trial_early_stopping,omitempty"`
	// ResumePreviousJobID seeds the search with the trials of a finished
	// tuning job over the same parameters.
	ResumePreviousJobID string `json:"resume_previous_job_id,omitempty"`
	// Algorithm is ALGORITHM_UNSPECIFIED or BAYESIAN_OPTIMIZATION (the
	// default: a Gaussian process), GRID_SEARCH or RANDOM_SEARCH.
	Algorithm string `json:"algorithm,omitempty"`
	// Params are the parameters searched.
	Params []TuningParam `json:"params"`
	// Seed makes the search reproducible. Default 1.
	Seed uint64 `json:"seed,omitempty"`
	// PollSecs is how often running trials' evaluations are read for early
	// stopping. Default 10.
	PollSecs int `json:"poll_secs,omitempty"`
	// SharePreprocessing preprocesses once for all trials whose data and
	// transform are the same (every trial, unless transform options are
	// tuned), in <job_id>_data_<k> (<job_dir>/data_<k> with a job_dir),
	// and links the result into each trial's job dir. Default true; false
	// lets every trial preprocess on its own.
	SharePreprocessing *bool `json:"share_preprocessing,omitempty"`
}

// Sharing reports whether trials share preprocessing (share_preprocessing,
// default true).
func (t TuningSpec) Sharing() bool { return t.SharePreprocessing == nil || *t.SharePreprocessing }

// TuningParam is one searched parameter.
type TuningParam struct {
	// ParameterName is the JobSpec field, by its JSON path: e.g.
	// model.learning_rate, model.batch_size, model.hidden_units[0],
	// model.optimizer. TunableFields lists them.
	ParameterName string `json:"parameter_name"`
	// Type is DOUBLE, INTEGER, CATEGORICAL or DISCRETE.
	Type string `json:"type"`
	// MinValue and MaxValue bound DOUBLE and INTEGER parameters.
	MinValue *float64 `json:"min_value,omitempty"`
	MaxValue *float64 `json:"max_value,omitempty"`
	// CategoricalValues are a CATEGORICAL parameter's values.
	CategoricalValues []string `json:"categorical_values,omitempty"`
	// DiscreteValues are a DISCRETE parameter's values, ascending.
	DiscreteValues []float64 `json:"discrete_values,omitempty"`
	// ScaleType is UNIT_LINEAR_SCALE (default), UNIT_LOG_SCALE or
	// UNIT_REVERSE_LOG_SCALE.
	ScaleType string `json:"scale_type,omitempty"`
}

// Tuning parameter types, scales, goals and algorithms.
const (
	ParamDouble      = "DOUBLE"
	ParamInteger     = "INTEGER"
	ParamCategorical = "CATEGORICAL"
	ParamDiscrete    = "DISCRETE"

	ScaleLinear     = "UNIT_LINEAR_SCALE"
	ScaleLog        = "UNIT_LOG_SCALE"
	ScaleReverseLog = "UNIT_REVERSE_LOG_SCALE"

	TuningMaximize = "MAXIMIZE"
	TuningMinimize = "MINIMIZE"

	AlgorithmBayesian = "BAYESIAN_OPTIMIZATION"
	AlgorithmGrid     = "GRID_SEARCH"
	AlgorithmRandom   = "RANDOM_SEARCH"
)

// MaxTuningTrials bounds max_trials.
const MaxTuningTrials = 1000

// fieldKind is what a tunable field holds.
type fieldKind int

const (
	fieldFloat fieldKind = iota
	fieldInt
	fieldString
	fieldLayers // model.hidden_units as a whole: CATEGORICAL "64,32"
	// fieldCrosses is data.schema.crosses as a whole: CATEGORICAL, each
	// value the names of the schema's crosses to keep ("a,b") or "none".
	fieldCrosses
)

// TunableFields are the JobSpec fields a tuning parameter can name, by
// JSON path, with what they hold. model.hidden_units[i] (i < 8) sets one
// layer's width; model.hidden_units itself takes CATEGORICAL values such
// as "128,64". Transform options are tunable too (TransformOptions): a
// trial whose transform differs from the others' preprocesses on its own.
// A sequential model's layers are tunable one field at a time
// (LayerFields: model.layers[i].<kind>.<field>, e.g.
// model.layers[3].dense.units); model.layers as a whole and
// model.input_shape are not.
var TunableFields = map[string]tunable{
	"model.learning_rate": {fieldFloat, func(s *JobSpec, v float64, _ string) error { s.Model.LearningRate = v; return nil }},
	"model.l1":            {fieldFloat, func(s *JobSpec, v float64, _ string) error { s.Model.L1 = v; return nil }},
	"model.l2":            {fieldFloat, func(s *JobSpec, v float64, _ string) error { s.Model.L2 = v; return nil }},
	"model.momentum":      {fieldFloat, func(s *JobSpec, v float64, _ string) error { s.Model.Momentum = v; return nil }},
	"model.clip_norm":     {fieldFloat, func(s *JobSpec, v float64, _ string) error { s.Model.ClipNorm = v; return nil }},
	"model.dropout":       {fieldFloat, func(s *JobSpec, v float64, _ string) error { s.Model.Dropout = v; return nil }},
	"model.batch_size":    {fieldInt, func(s *JobSpec, v float64, _ string) error { s.Model.BatchSize = int(v); return nil }},
	"model.hidden_units":  {fieldLayers, setHiddenUnits},
	"model.type":          {fieldString, func(s *JobSpec, _ float64, v string) error { s.Model.Type = v; return nil }},
	"model.optimizer":     {fieldString, func(s *JobSpec, _ float64, v string) error { s.Model.Optimizer = v; return nil }},
	"train.max_steps":     {fieldInt, func(s *JobSpec, v float64, _ string) error { s.Train.MaxSteps = int64(v); return nil }},
}

// Layer fields: model.layers[i].<kind>.<field> names field of layer i
// of a sequential model, which must be of that kind.
const layersPrefix = "model.layers["

// LayerFields are the tunable fields of a layer stack's layers, by
// "<kind>.<field>" (the layer's JSON key and its body's): what the field
// holds, and how a trial's value is set on a copy of the layer. A kernel
// or pool size is tuned as n (an n×n window).
var LayerFields = map[string]layerField{
	"dense.units":          {fieldInt, func(l *train.LayerSpec, v float64) { l.Dense.Units = int(v) }},
	"conv2d.filters":       {fieldInt, func(l *train.LayerSpec, v float64) { l.Conv2D.Filters = int(v) }},
	"conv2d.kernel":        {fieldInt, func(l *train.LayerSpec, v float64) { l.Conv2D.Kernel = train.Window{int(v), int(v)} }},
	"max_pool2d.size":      {fieldInt, func(l *train.LayerSpec, v float64) { l.MaxPool2D.Size = train.Window{int(v), int(v)} }},
	"avg_pool2d.size":      {fieldInt, func(l *train.LayerSpec, v float64) { l.AvgPool2D.Size = train.Window{int(v), int(v)} }},
	"dropout.rate":         {fieldFloat, func(l *train.LayerSpec, v float64) { l.Dropout.Rate = v }},
	"layer_norm.epsilon":   {fieldFloat, func(l *train.LayerSpec, v float64) { l.LayerNorm.Epsilon = v }},
	"embedding.output_dim": {fieldInt, func(l *train.LayerSpec, v float64) { l.Embedding.OutputDim = int(v) }},
}

// layerField is one entry of LayerFields.
type layerField struct {
	kind fieldKind
	set  func(l *train.LayerSpec, num float64)
}

// layerParam splits a parameter name model.layers[i].<kind>.<field> into
// the layer's index, "<kind>.<field>" and its LayerFields entry.
func layerParam(name string) (i int, key string, f layerField, ok bool) {
	rest, ok := strings.CutPrefix(name, layersPrefix)
	if !ok {
		return 0, "", f, false
	}
	n, key, ok := strings.Cut(rest, "].")
	if !ok {
		return 0, "", f, false
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || i >= MaxLayers || strconv.Itoa(i) != n {
		return 0, "", f, false
	}
	f, ok = LayerFields[key]
	return i, key, f, ok
}

// setLayer sets the layer field path names in s's layers (copied first,
// the layer's body too) to num. The layer must exist and be of the
// field's kind.
func setLayer(s *JobSpec, path string, num float64) error {
	i, key, f, _ := layerParam(path)
	kind, _, _ := strings.Cut(key, ".")
	if i >= len(s.Model.Layers) {
		return fmt.Errorf("%s: model.layers has %d layers", path, len(s.Model.Layers))
	}
	if got := s.Model.Layers[i].Kind(); got != kind {
		return fmt.Errorf("%s: model.layers[%d] is a %s layer, not %s", path, i, cmp.Or(got, "kindless"), kind)
	}
	layers := slices.Clone(s.Model.Layers)
	layers[i] = layers[i].Clone()
	f.set(&layers[i], num)
	s.Model.Layers = layers
	return nil
}

// tunable is one entry of TunableFields: what the field holds, and how a
// trial's value (num for numeric kinds, str for the others) is set.
type tunable struct {
	kind fieldKind
	set  func(s *JobSpec, num float64, str string) error
}

// option is one entry of ColumnOptions or CrossOptions: what the option
// holds, and how a trial's value is set on a column (col) or a cross (x).
type option struct {
	kind fieldKind
	col  func(c *preprocess.Column, num float64, str string) error
	x    func(x *preprocess.Cross, num float64, str string)
}

// Transform options a tuning parameter can name:
// data.schema.columns.<column>.<option> with an option of ColumnOptions,
// data.schema.crosses.<cross>.<option> with an option of CrossOptions, and
// data.schema.crosses itself (CATEGORICAL: which of the schema's crosses
// to keep, "a,b" or "none").
const (
	columnsPrefix = "data.schema.columns."
	crossesField  = "data.schema.crosses"
	crossesPrefix = crossesField + "."
)

// ColumnOptions are the tunable options of a schema column, with what
// they hold (see preprocess.Column); log1p takes "true" or "false".
var ColumnOptions = map[string]option{
	"buckets":         {kind: fieldInt, col: func(c *preprocess.Column, v float64, _ string) error { c.Buckets = int(v); return nil }},
	"hash_buckets":    {kind: fieldInt, col: func(c *preprocess.Column, v float64, _ string) error { c.HashBuckets = int(v); return nil }},
	"top_k":           {kind: fieldInt, col: func(c *preprocess.Column, v float64, _ string) error { c.TopK = int(v); return nil }},
	"min_frequency":   {kind: fieldInt, col: func(c *preprocess.Column, v float64, _ string) error { c.MinFrequency = int64(v); return nil }},
	"num_oov_buckets": {kind: fieldInt, col: func(c *preprocess.Column, v float64, _ string) error { c.NumOOVBuckets = int(v); return nil }},
	"clip_min":        {kind: fieldFloat, col: func(c *preprocess.Column, v float64, _ string) error { c.ClipMin = &v; return nil }},
	"clip_max":        {kind: fieldFloat, col: func(c *preprocess.Column, v float64, _ string) error { c.ClipMax = &v; return nil }},
	"treatment":       {kind: fieldString, col: func(c *preprocess.Column, _ float64, v string) error { c.Treatment = v; return nil }},
	"output":          {kind: fieldString, col: func(c *preprocess.Column, _ float64, v string) error { c.Output = v; return nil }},
	"log1p":           {kind: fieldString, col: setLog1P},
}

// CrossOptions are the tunable options of a schema cross.
var CrossOptions = map[string]option{
	"hash_buckets": {kind: fieldInt, x: func(x *preprocess.Cross, v float64, _ string) { x.HashBuckets = int(v) }},
	"output":       {kind: fieldString, x: func(x *preprocess.Cross, _ float64, v string) { x.Output = v }},
}

// setLog1P sets a column's log1p option from "true" or "false".
func setLog1P(c *preprocess.Column, _ float64, str string) error {
	switch str {
	case "true":
		c.Log1P = true
	case "false":
		c.Log1P = false
	default:
		return fmt.Errorf("value %q: want \"true\" or \"false\"", str)
	}
	return nil
}

// transformField splits a transform option's name into the column or
// cross it names and the option ("" for data.schema.crosses itself).
func transformField(name string) (kind fieldKind, cross bool, target, option string, ok bool) {
	if name == crossesField {
		return fieldCrosses, true, "", "", true
	}
	opts, rest := ColumnOptions, ""
	switch {
	case strings.HasPrefix(name, columnsPrefix):
		rest = name[len(columnsPrefix):]
	case strings.HasPrefix(name, crossesPrefix):
		opts, cross, rest = CrossOptions, true, name[len(crossesPrefix):]
	default:
		return 0, false, "", "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return 0, false, "", "", false
	}
	o, ok := opts[rest[i+1:]]
	return o.kind, cross, rest[:i], rest[i+1:], ok
}

// IsTransformParam reports whether a tuning parameter names a transform
// option, so that trials differing in it preprocess apart.
func IsTransformParam(name string) bool {
	_, _, _, _, ok := transformField(name)
	return ok
}

// IsTunable reports whether a tuning parameter may name the JobSpec field
// at path: an entry of TunableFields, model.hidden_units[i] (i < 8), a
// layer field (model.layers[i].<kind>.<field>, LayerFields) or a
// transform option (IsTransformParam).
func IsTunable(path string) bool {
	_, _, ok := tunableField(path)
	return ok
}

// tunableField resolves a parameter name: a TunableFields path,
// model.hidden_units[i] (returning i), a layer field or a transform
// option.
func tunableField(name string) (fieldKind, int, bool) {
	if f, ok := TunableFields[name]; ok {
		return f.kind, -1, true
	}
	if _, _, f, ok := layerParam(name); ok {
		return f.kind, -1, true
	}
	if k, _, _, _, ok := transformField(name); ok {
		return k, -1, true
	}
	if rest, ok := strings.CutPrefix(name, "model.hidden_units["); ok {
		if n, ok := strings.CutSuffix(rest, "]"); ok {
			if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < 8 && strconv.Itoa(i) == n {
				return fieldInt, i, true
			}
		}
	}
	return 0, 0, false
}

// WithDefaults returns t with defaults filled in.
func (t TuningSpec) WithDefaults() TuningSpec {
	if t.HyperparameterMetricTag == "" {
		t.HyperparameterMetricTag = train.MetricAccuracy
	}
	if t.Goal == "" {
		t.Goal = strings.ToUpper(metricGoal(t.HyperparameterMetricTag))
	}
	if t.MaxTrials == 0 {
		t.MaxTrials = 10
	}
	if t.MaxParallelTrials == 0 {
		t.MaxParallelTrials = 1
	}
	if t.MaxFailedTrials == 0 {
		t.MaxFailedTrials = t.MaxTrials
	}
	if t.Algorithm == "" || t.Algorithm == "ALGORITHM_UNSPECIFIED" {
		t.Algorithm = AlgorithmBayesian
	}
	if t.Seed == 0 {
		t.Seed = 1
	}
	if t.PollSecs == 0 {
		t.PollSecs = 10
	}
	params := slices.Clone(t.Params)
	for i := range params {
		if params[i].ScaleType == "" {
			params[i].ScaleType = ScaleLinear
		}
	}
	t.Params = params
	return t
}

// trialIDSuffix is the longest suffix a trial's job ID adds: _trial_NNNN.
const trialIDSuffix = len("_trial_1000")

// TrialID is the job (and workflow) ID of trial n of tuning job jobID.
func TrialID(jobID string, n int) string { return fmt.Sprintf("%s_trial_%d", jobID, n) }

// DataID is the job ID under which tuning job jobID preprocesses its k-th
// distinct data and transform (the name of its job dir).
func DataID(jobID string, k int) string { return fmt.Sprintf("%s_data_%d", jobID, k) }

// TrialDir is the directory of trial n's job directory below the job_dir
// of a tuning job's spec: trial_<n> (TrialSpec). It is named here, beside
// the ID it mirrors, and listed in jobdir's layout table: jobspec, which
// workflows link, cannot import jobdir (it links storage).
func TrialDir(n int) string { return "trial_" + strconv.Itoa(n) }

// SharedDataDir is the directory of a tuning job's k-th shared
// preprocessing below the job_dir of its spec: data_<k> (SharedDataSpec;
// named here for TrialDir's reason).
func SharedDataDir(k int) string { return "data_" + strconv.Itoa(k) }

// isTrialOf reports whether id is TrialID(jobID, n) for some n ≥ 1.
func isTrialOf(id, jobID string) bool { return isNumbered(id, jobID+"_trial_") }

// IsDataOf reports whether id is DataID(jobID, k) for some k ≥ 1.
func IsDataOf(id, jobID string) bool { return isNumbered(id, jobID+"_data_") }

// IsTrialOf reports whether id is TrialID(jobID, n) for some n ≥ 1.
func IsTrialOf(id, jobID string) bool { return isTrialOf(id, jobID) }

// TrialNumber is the number n of id = TrialID(jobID, n), as spelled in
// it, and "" if id is no trial of jobID.
func TrialNumber(id, jobID string) string {
	if !isTrialOf(id, jobID) {
		return ""
	}
	prefix := TrialID(jobID, 0)
	return strings.TrimPrefix(id, prefix[:len(prefix)-1])
}

func isNumbered(id, prefix string) bool {
	n, ok := strings.CutPrefix(id, prefix)
	if !ok || n == "" || n[0] == '0' || len(n) > 9 {
		return false
	}
	for _, r := range n {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// SharedDataSpec is the spec under which a tuning job preprocesses, once,
// the data of trials whose spec is like ts: ts with job ID
// DataID(job_id, k), in <job_dir>/data_<k> when the tuning job has a
// job_dir, else the worker's default job dir of that ID. Only its data,
// seed and job dir matter (PrepareJob and Preprocess read nothing else).
func (s JobSpec) SharedDataSpec(k int, ts JobSpec) JobSpec {
	d := ts
	d.JobID = DataID(s.JobID, k)
	d.JobDir = ""
	if s.JobDir != "" {
		d.JobDir = joinJobDir(s.JobDir, SharedDataDir(k))
	}
	d.SharedData = nil
	return d.WithDefaults()
}

// DataKey identifies what a trial's preprocessing makes: a hash of its
// defaulted data spec (schema and transform options included, the
// runner's job name excluded) and its seed. Trials with equal keys can
// share one preprocessing.
func DataKey(ts JobSpec) string {
	d := ts.WithDefaults()
	k := struct {
		Data DataSpec `json:"data"`
		Seed uint64   `json:"seed"`
	}{d.Data, d.Train.Seed}
	k.Data.JobName = ""
	//workflowcheck:ignore json.Marshal of a struct is deterministic (map keys sorted)
	b, _ := json.Marshal(k)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// appFlag and appTag are the shapes of an application's tuned flag
// names and metric tag.
var (
	appFlag = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,99}$`)
	appTag  = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,200}$`)
)

// validateTuning checks a defaulted spec's tuning block against the spec
// (s has Tuning set and defaults applied).
func (s *JobSpec) validateTuning() error {
	t := s.Tuning
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: tuning.%s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if len(s.JobID) > MaxJobIDLength-trialIDSuffix {
		return fmt.Errorf("%w: job_id: a tuning job's ID has at most %d characters (trial IDs add %q)", ErrInvalid, MaxJobIDLength-trialIDSuffix, "_trial_N")
	}
	goal := metricGoal(t.HyperparameterMetricTag)
	app := s.Application != nil
	switch {
	case app && !appTag.MatchString(t.HyperparameterMetricTag):
		return bad("hyperparameter_metric_tag %q: want the tag the application writes to its hypertune metrics file (letters, digits, '_', '-', '.', '/')", t.HyperparameterMetricTag)
	case goal == "" && !app:
		return bad("hyperparameter_metric_tag %q: want accuracy, auc, log_loss, rmse or mae", t.HyperparameterMetricTag)
	case t.Goal != TuningMaximize && t.Goal != TuningMinimize:
		return bad("goal %q: want MAXIMIZE or MINIMIZE", t.Goal)
	case t.MaxTrials < 1 || t.MaxTrials > MaxTuningTrials:
		return bad("max_trials = %d is out of range [1, %d]", t.MaxTrials, MaxTuningTrials)
	case t.MaxParallelTrials < 1 || t.MaxParallelTrials > t.MaxTrials:
		return bad("max_parallel_trials = %d: want 1 ≤ max_parallel_trials ≤ max_trials (%d)", t.MaxParallelTrials, t.MaxTrials)
	case t.MaxFailedTrials < 1:
		return bad("max_failed_trials = %d is negative", t.MaxFailedTrials)
	case t.Algorithm != AlgorithmBayesian && t.Algorithm != AlgorithmGrid && t.Algorithm != AlgorithmRandom:
		return bad("algorithm %q: want BAYESIAN_OPTIMIZATION, GRID_SEARCH or RANDOM_SEARCH", t.Algorithm)
	case t.PollSecs < 1 || t.PollSecs > 3600:
		return bad("poll_secs = %d is out of range [1, 3600]", t.PollSecs)
	case len(t.Params) == 0:
		return bad("params: at least one parameter is needed")
	case len(t.Params) > 20:
		return bad("params: %d parameters, at most 20", len(t.Params))
	case t.ResumePreviousJobID != "" && !ident.Valid(t.ResumePreviousJobID):
		return bad("resume_previous_job_id %q is not a job ID", t.ResumePreviousJobID)
	case t.ResumePreviousJobID == s.JobID:
		return bad("resume_previous_job_id is this job")
	}
	seen := map[string]bool{}
	for i, p := range t.Params {
		field := fmt.Sprintf("params[%d] (%s)", i, p.ParameterName)
		kind, _, ok := tunableField(p.ParameterName)
		check := s.checkValue
		if app { // an argument of the program: --name=value
			if !appFlag.MatchString(p.ParameterName) {
				return bad("params[%d].parameter_name %q: an application's parameter is its command-line flag without dashes (letters, digits, '_', '-', starting with a letter)", i, p.ParameterName)
			}
			kind, ok = fieldFloat, true
			if p.Type == ParamCategorical {
				kind = fieldString
			}
			check = func(TuningParam, fieldKind, float64, string) error { return nil }
		}
		if !ok {
			return bad("params[%d].parameter_name %q is not a tunable field (want one of %s, model.hidden_units[i], %si].<%s>, %s<column>.<%s>, %s<cross>.<%s> or %s)",
				i, p.ParameterName, strings.Join(sortedTunable(), ", "), layersPrefix, strings.Join(sortedKeys(LayerFields), "|"), columnsPrefix, strings.Join(sortedKeys(ColumnOptions), "|"), crossesPrefix, strings.Join(sortedKeys(CrossOptions), "|"), crossesField)
		}
		if err := s.checkTransformParam(p.ParameterName); err != nil {
			return bad("params[%d].parameter_name %q: %v", i, p.ParameterName, err)
		}
		if _, _, _, ok := layerParam(p.ParameterName); ok {
			// The layer must exist and be of the field's kind: any value does.
			probe := *s
			if err := setLayer(&probe, p.ParameterName, 1); err != nil {
				return bad("params[%d].parameter_name %v", i, err)
			}
		}
		if seen[p.ParameterName] {
			return bad("%s: parameter named twice", field)
		}
		seen[p.ParameterName] = true
		if p.ParameterName == "model.hidden_units" && slices.ContainsFunc(t.Params, func(q TuningParam) bool { return strings.HasPrefix(q.ParameterName, "model.hidden_units[") }) {
			return bad("%s: tune model.hidden_units or its layers, not both", field)
		}
		numeric := p.MinValue != nil || p.MaxValue != nil
		switch p.Type {
		case ParamDouble, ParamInteger:
			if kind != fieldFloat && kind != fieldInt {
				return bad("%s.type %s: the field takes CATEGORICAL values", field, p.Type)
			}
			if p.Type == ParamDouble && kind == fieldInt {
				return bad("%s.type DOUBLE on an integer field: want INTEGER or DISCRETE", field)
			}
			if p.MinValue == nil || p.MaxValue == nil {
				return bad("%s: min_value and max_value are required for %s", field, p.Type)
			}
			lo, hi := *p.MinValue, *p.MaxValue
			if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) || lo > hi {
				return bad("%s: min_value %g > max_value %g", field, lo, hi)
			}
			if p.Type == ParamInteger && (lo != math.Trunc(lo) || hi != math.Trunc(hi) || hi-lo > 1e9) {
				return bad("%s: INTEGER bounds must be integers", field)
			}
			if len(p.CategoricalValues) > 0 || len(p.DiscreteValues) > 0 {
				return bad("%s: %s takes min_value and max_value only", field, p.Type)
			}
			for _, v := range []float64{lo, hi} {
				if err := check(p, kind, v, ""); err != nil {
					return bad("%s: %v", field, err)
				}
			}
		case ParamDiscrete:
			if kind != fieldFloat && kind != fieldInt {
				return bad("%s.type DISCRETE: the field takes CATEGORICAL values", field)
			}
			if len(p.DiscreteValues) == 0 || len(p.DiscreteValues) > 1000 || numeric || len(p.CategoricalValues) > 0 {
				return bad("%s: DISCRETE takes 1 to 1000 discrete_values only", field)
			}
			if !slices.IsSorted(p.DiscreteValues) || len(slices.Compact(slices.Clone(p.DiscreteValues))) != len(p.DiscreteValues) {
				return bad("%s.discrete_values must be distinct and ascending", field)
			}
			for _, v := range p.DiscreteValues {
				if kind == fieldInt && v != math.Trunc(v) {
					return bad("%s.discrete_values: %g on an integer field", field, v)
				}
				if err := check(p, kind, v, ""); err != nil {
					return bad("%s: %v", field, err)
				}
			}
		case ParamCategorical:
			if kind != fieldString && kind != fieldLayers && kind != fieldCrosses {
				return bad("%s.type CATEGORICAL on a numeric field: want DOUBLE, INTEGER or DISCRETE", field)
			}
			if len(p.CategoricalValues) == 0 || len(p.CategoricalValues) > 100 || numeric || len(p.DiscreteValues) > 0 {
				return bad("%s: CATEGORICAL takes 1 to 100 categorical_values only", field)
			}
			for j, v := range p.CategoricalValues {
				if slices.Index(p.CategoricalValues, v) != j {
					return bad("%s.categorical_values: %q twice", field, v)
				}
				if err := check(p, kind, 0, v); err != nil {
					return bad("%s: %v", field, err)
				}
			}
		default:
			return bad("%s.type %q: want DOUBLE, INTEGER, CATEGORICAL or DISCRETE", field, p.Type)
		}
		switch p.ScaleType {
		case ScaleLinear:
		case ScaleLog, ScaleReverseLog:
			if p.Type == ParamCategorical {
				return bad("%s.scale_type %s: a CATEGORICAL parameter has no scale", field, p.ScaleType)
			}
			if lo := lowest(p); lo <= 0 {
				return bad("%s.scale_type %s needs values > 0, min is %g", field, p.ScaleType, lo)
			}
		default:
			return bad("%s.scale_type %q: want UNIT_LINEAR_SCALE, UNIT_LOG_SCALE or UNIT_REVERSE_LOG_SCALE", field, p.ScaleType)
		}
	}
	if t.Algorithm == AlgorithmGrid {
		for i, p := range t.Params {
			if p.Type == ParamDouble {
				return bad("params[%d] (%s): GRID_SEARCH needs INTEGER, CATEGORICAL or DISCRETE parameters", i, p.ParameterName)
			}
		}
		grid, err := t.Space().GridSize(MaxTuningTrials)
		if err != nil { // more points than any max_trials (the DOUBLE parameters are refused above)
			grid = MaxTuningTrials + 1
		}
		if grid > t.MaxTrials {
			return bad("max_trials = %d is smaller than the grid (%s points): raise max_trials or shrink the grid", t.MaxTrials, gridSizeText(grid))
		}
	}
	return nil
}

func gridSizeText(n int) string {
	if n > MaxTuningTrials {
		return fmt.Sprintf("more than %d", MaxTuningTrials)
	}
	return strconv.Itoa(n)
}

func lowest(p TuningParam) float64 {
	if p.Type == ParamDiscrete {
		return p.DiscreteValues[0]
	}
	return *p.MinValue
}

func sortedTunable() []string { return sortedKeys(TunableFields) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	//workflowcheck:ignore the keys are sorted below
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// optionTreatments are the treatments under which a column option has an
// effect (none listed: every treatment of a number column).
var optionTreatments = map[string][]string{
	"buckets":         {preprocess.Bucketize},
	"hash_buckets":    {preprocess.Hash},
	"top_k":           {preprocess.OneHot, preprocess.Index},
	"min_frequency":   {preprocess.OneHot, preprocess.Index},
	"num_oov_buckets": {preprocess.OneHot, preprocess.Index},
	"output":          {preprocess.Bucketize, preprocess.Hash},
}

// checkTransformParam checks that a transform option names a column or
// cross of the spec's schema, and an option that matters under the
// column's treatment (unless the treatment is tuned too).
func (s *JobSpec) checkTransformParam(name string) error {
	_, cross, target, option, ok := transformField(name)
	if !ok || s.Data.Schema == nil {
		return nil
	}
	sc := s.Data.Schema
	if cross {
		if target == "" {
			if len(sc.Crosses) == 0 {
				return fmt.Errorf("data.schema has no crosses to choose from")
			}
			return nil
		}
		if !slices.ContainsFunc(sc.Crosses, func(x preprocess.Cross) bool { return x.Name == target }) {
			return fmt.Errorf("data.schema has no cross %q (crosses: %s)", target, strings.Join(crossNames(sc.Crosses), ", "))
		}
		return nil
	}
	j := slices.IndexFunc(sc.Columns, func(c preprocess.Column) bool { return c.Name == target })
	if j < 0 {
		names := make([]string, len(sc.Columns))
		for i, c := range sc.Columns {
			names[i] = c.Name
		}
		return fmt.Errorf("data.schema has no column %q (columns: %s)", target, strings.Join(names, ", "))
	}
	c := sc.Columns[j]
	if c.Name == sc.Label {
		return fmt.Errorf("column %q is the label", target)
	}
	if option == "treatment" || slices.ContainsFunc(s.Tuning.Params, func(q TuningParam) bool { return q.ParameterName == columnsPrefix+target+".treatment" }) {
		return nil
	}
	t := c.Treatment
	if t == "" {
		t = map[string]string{preprocess.TypeNumber: preprocess.ZScore, preprocess.TypeString: preprocess.OneHot}[c.Type]
	}
	if ts := optionTreatments[option]; len(ts) > 0 && !slices.Contains(ts, t) {
		return fmt.Errorf("%s applies to treatment %s, column %q has treatment %q (tune %s%s.treatment too, or set it)", option, strings.Join(ts, " or "), target, t, columnsPrefix, target)
	}
	if (option == "clip_min" || option == "clip_max" || option == "log1p") && c.Type != preprocess.TypeNumber {
		return fmt.Errorf("%s applies to number columns, column %q has type %q", option, target, c.Type)
	}
	return nil
}

func crossNames(xs []preprocess.Cross) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.Name
	}
	return out
}

// cloneSchema copies a schema deeply enough that setting one column's or
// cross's option leaves the original as it was.
func cloneSchema(sc *preprocess.Schema) *preprocess.Schema {
	c := *sc
	c.Columns = slices.Clone(sc.Columns)
	c.Crosses = slices.Clone(sc.Crosses)
	return &c
}

// setTransform sets the transform option path of s's schema (cloned
// first) to num or str.
func setTransform(s *JobSpec, path string, num float64, str string) error {
	_, cross, target, option, _ := transformField(path)
	if s.Data.Schema == nil {
		return fmt.Errorf("%s: the spec has no data.schema", path)
	}
	sc := cloneSchema(s.Data.Schema)
	s.Data.Schema = sc
	if cross && target == "" { // which crosses to keep
		keep := []preprocess.Cross{}
		if str != "none" {
			for f := range strings.FieldsFuncSeq(str, func(r rune) bool { return r == ',' || r == ' ' }) {
				j := slices.IndexFunc(sc.Crosses, func(x preprocess.Cross) bool { return x.Name == f })
				if j < 0 {
					return fmt.Errorf("%s value %q: data.schema has no cross %q (want names of its crosses such as \"a,b\", or \"none\")", path, str, f)
				}
				keep = append(keep, sc.Crosses[j])
			}
			if len(keep) == 0 {
				return fmt.Errorf("%s value %q: want names of crosses such as \"a,b\", or \"none\"", path, str)
			}
		}
		if len(keep) == 0 {
			keep = nil
		}
		sc.Crosses = keep
		return nil
	}
	if cross {
		j := slices.IndexFunc(sc.Crosses, func(x preprocess.Cross) bool { return x.Name == target })
		if j < 0 {
			return fmt.Errorf("%s: data.schema has no cross %q", path, target)
		}
		x := &sc.Crosses[j]
		x.Columns = slices.Clone(x.Columns)
		CrossOptions[option].x(x, num, str)
		return nil
	}
	j := slices.IndexFunc(sc.Columns, func(c preprocess.Column) bool { return c.Name == target })
	if j < 0 {
		return fmt.Errorf("%s: data.schema has no column %q", path, target)
	}
	if err := ColumnOptions[option].col(&sc.Columns[j], num, str); err != nil {
		return fmt.Errorf("%s %w", path, err)
	}
	return nil
}

// checkValue applies one value of p to a copy of the spec and validates
// the result, so a value the training job would refuse is refused here.
func (s *JobSpec) checkValue(p TuningParam, kind fieldKind, num float64, str string) error {
	trial := *s
	trial.Tuning = nil
	trial.Model.HiddenUnits = slices.Clone(s.Model.HiddenUnits)
	if err := setField(&trial, p.ParameterName, num, str); err != nil {
		return err
	}
	if err := trial.Validate(); err != nil {
		return fmt.Errorf("value %s: %s", valueText(kind, num, str), strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	return nil
}

func valueText(kind fieldKind, num float64, str string) string {
	if kind == fieldString || kind == fieldLayers || kind == fieldCrosses {
		return strconv.Quote(str)
	}
	return strconv.FormatFloat(num, 'g', -1, 64)
}

// setField sets the field named by path to num (numeric fields) or str.
func setField(s *JobSpec, path string, num float64, str string) error {
	_, layer, ok := tunableField(path)
	if !ok {
		return fmt.Errorf("%s is not a tunable field", path)
	}
	if IsTransformParam(path) {
		return setTransform(s, path, num, str)
	}
	if _, _, _, ok := layerParam(path); ok {
		return setLayer(s, path, num)
	}
	if layer >= 0 {
		if layer >= len(s.Model.HiddenUnits) {
			return fmt.Errorf("%s: model.hidden_units has %d layers", path, len(s.Model.HiddenUnits))
		}
		s.Model.HiddenUnits[layer] = int(num)
		return nil
	}
	return TunableFields[path].set(s, num, str)
}

// setHiddenUnits sets model.hidden_units from layer widths such as
// "128,64".
func setHiddenUnits(s *JobSpec, _ float64, str string) error {
	var units []int
	for f := range strings.FieldsFuncSeq(str, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("model.hidden_units value %q: want layer widths such as \"128,64\"", str)
		}
		units = append(units, n)
	}
	if len(units) == 0 || len(units) > 16 {
		return fmt.Errorf("model.hidden_units value %q: want 1 to 16 layer widths such as \"128,64\"", str)
	}
	s.Model.HiddenUnits = units
	return nil
}

// TrialSpec is the JobSpec of trial n with parameter values x (one per
// tuning param: the number, or the index of a categorical value): the
// tuning job's spec without its tuning block, under the trial's job ID, in
// a job dir of its own, publishing nothing (the tuning job publishes the
// best trial's model).
//
// s is the spec as given (not defaulted), so that the trial defaults its
// own job-derived fields (data.job_name).
func (s JobSpec) TrialSpec(n int, x []float64) (JobSpec, error) {
	d := s.WithDefaults()
	t := d.Tuning
	trial := s
	trial.Tuning = nil
	trial.SharedData = nil
	trial.JobID = TrialID(s.JobID, n)
	trial.Publish = PublishNone
	trial.Promote = PromoteNever
	trial.Bless = nil
	trial.Model.HiddenUnits = slices.Clone(d.Model.HiddenUnits)
	if s.JobDir != "" {
		trial.JobDir = joinJobDir(s.JobDir, TrialDir(n))
	}
	if slices.ContainsFunc(t.Params, func(p TuningParam) bool { return IsTransformParam(p.ParameterName) }) {
		trial.Data.Schema = d.Data.Schema // the preset's, if s names none; setField clones it
	}
	layered := slices.ContainsFunc(t.Params, func(p TuningParam) bool { _, _, _, ok := layerParam(p.ParameterName); return ok })
	if layered {
		trial.Model.Layers = d.Model.Layers // the preset's, if s names none; setField copies them
	}
	if len(x) != len(t.Params) {
		return trial, fmt.Errorf("trial %d: %d values for %d parameters", n, len(x), len(t.Params))
	}
	if s.Application != nil { // the seeds' convention: --name=value after the job's args
		a := *s.Application
		a.Args = slices.Clone(a.Args)
		for i, p := range t.Params {
			v := strconv.FormatFloat(x[i], 'g', -1, 64)
			switch p.Type {
			case ParamInteger:
				v = strconv.FormatInt(int64(math.Round(x[i])), 10)
			case ParamCategorical:
				j := int(x[i])
				if j < 0 || j >= len(p.CategoricalValues) {
					return trial, fmt.Errorf("trial %d: %s index %d", n, p.ParameterName, j)
				}
				v = p.CategoricalValues[j]
			}
			a.Args = append(a.Args, "--"+p.ParameterName+"="+v)
		}
		trial.Application = &a
		return trial, nil
	}
	for i, p := range t.Params {
		num, str := x[i], ""
		if p.Type == ParamCategorical {
			j := int(x[i])
			if j < 0 || j >= len(p.CategoricalValues) {
				return trial, fmt.Errorf("trial %d: %s index %d", n, p.ParameterName, j)
			}
			str = p.CategoricalValues[j]
		}
		if err := setField(&trial, p.ParameterName, num, str); err != nil {
			return trial, err
		}
	}
	if layered {
		// Each layer field was checked alone at its bounds; this
		// trial's values together must still make a stack that fits.
		v := trial.WithDefaults()
		if err := v.validateLayers(); err != nil {
			return trial, fmt.Errorf("trial %d: %w", n, err)
		}
	}
	return trial, nil
}

// Space is the search space of t's params, one tuning.Param per
// parameter in their order: INTEGER and DOUBLE bounds, DISCRETE values,
// the number of CATEGORICAL values (a point holds the index of one), and
// the scale. Every search (SuggestTrials) and the grid's size (Validate)
// come from it.
func (t TuningSpec) Space() tuning.Space {
	s := make(tuning.Space, len(t.Params))
	for i, p := range t.Params {
		q := tuning.Param{Name: p.ParameterName}
		switch p.Type {
		case ParamDouble, ParamInteger:
			q.Kind = tuning.Double
			if p.Type == ParamInteger {
				q.Kind = tuning.Integer
			}
			if p.MinValue != nil && p.MaxValue != nil {
				q.Min, q.Max = *p.MinValue, *p.MaxValue
			}
		case ParamDiscrete:
			q.Kind, q.Values = tuning.Discrete, p.DiscreteValues
		case ParamCategorical:
			q.Kind, q.Choices = tuning.Categorical, len(p.CategoricalValues)
		}
		switch p.ScaleType {
		case ScaleLog:
			q.Scale = tuning.Log
		case ScaleReverseLog:
			q.Scale = tuning.ReverseLog
		}
		s[i] = q
	}
	return s
}

// TrialParams renders trial values x by parameter name.
func (t TuningSpec) TrialParams(x []float64) map[string]string {
	out := make(map[string]string, len(t.Params))
	for i, p := range t.Params {
		if i >= len(x) {
			break
		}
		if p.Type == ParamCategorical {
			if j := int(x[i]); j >= 0 && j < len(p.CategoricalValues) {
				out[p.ParameterName] = p.CategoricalValues[j]
			}
			continue
		}
		out[p.ParameterName] = strconv.FormatFloat(x[i], 'g', 6, 64)
	}
	return out
}

// joinJobDir appends elem to a job dir path or storage URI, before any
// query string (s3://bucket/jobs?region=r → s3://bucket/jobs/elem?region=r).
func joinJobDir(dir, elem string) string {
	base, query, hasQuery := strings.Cut(dir, "?")
	out := strings.TrimSuffix(base, "/") + "/" + elem
	if hasQuery {
		out += "?" + query
	}
	return out
}
