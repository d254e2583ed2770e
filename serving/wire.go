package serving

import (
	"encoding/json"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// The server's wire names, each in one place: the route paths, the verbs,
// the JSON keys the scanners match, and the JSON shapes of the answers
// (their struct tags). docs/serving-api.md says, route by route, where
// they conform to TF Serving's REST API and the Open Inference Protocol
// (KServe V2) and where they deviate.

// Routes of the TF Serving REST API (v1) and of the Open Inference
// Protocol (V2). POST routeV1Verbs takes NAME[/versions/N|/labels/L]:VERB.
const (
	routeMetrics   = "/metrics"
	routeV1Models  = "/v1/models"
	routeV1Model   = "/v1/models/:name"
	routeV1Version = "/v1/models/:name/versions/:version"
	routeV1Label   = "/v1/models/:name/labels/:label"
	routeV1Verbs   = "/v1/models/*"
	// routeV1Feedback takes the true label of an earlier prediction.
	routeV1Feedback = "/v1/models/:name/feedback"
	suffixMetadata  = "/metadata"

	routeV2Server  = "/v2"
	routeV2Live    = "/v2/health/live"
	routeV2Ready   = "/v2/health/ready"
	routeV2Model   = "/v2/models/:name"
	routeV2Version = "/v2/models/:name/versions/:version"
	suffixReady    = "/ready"
	suffixInfer    = "/infer"

	// pathVersions and pathLabels select a version in a v1 :VERB path.
	pathVersions = "/versions/"
	pathLabels   = "/labels/"
)

// Verbs of POST /v1/models/NAME…:VERB.
const (
	verbPredict  = "predict"
	verbClassify = "classify"
	verbRegress  = "regress"
)

// Signature names, as TF estimators export them: the metadata lists
// sigDefault and sigClassification or sigRegression.
const (
	sigDefault        = "serving_default"
	sigPredict        = "predict"
	sigClassification = "classification"
	sigRegression     = "regression"
)

// signatures are the signature_name values each verb answers; "" is
// the default.
var signatures = map[string][]string{
	verbPredict:  {"", sigDefault, sigPredict, methodPredict},
	verbClassify: {"", sigDefault, sigClassification, methodClassify},
	verbRegress:  {"", sigDefault, sigRegression, methodRegress},
}

// JSON keys the request scanners match (decode.go, v2decode.go).
const (
	keyInstances     = "instances"
	keyInputs        = "inputs"
	keySignatureName = "signature_name"
	keyExamples      = "examples"
	keyOutputs       = "outputs"
	keyID            = "id"
	keyParameters    = "parameters"
	keyName          = "name"
	keyShape         = "shape"
	keyDatatype      = "datatype"
	keyData          = "data"
)

// Output tensors: a classifier answers class, class_index, probabilities
// and logits; a regressor answers value. The same names key a v1
// prediction object, a v1 columnar "outputs" object and the V2 output
// tensors.
const (
	outClass         = "class"
	outClassIndex    = "class_index"
	outProbabilities = "probabilities"
	outLogits        = "logits"
	outValue         = "value"
)

// predictRequest is the body of :predict: row format ("instances") or
// columnar format ("inputs": an object of columns, or for a model of one
// input a list of its values).
type predictRequest struct {
	SignatureName string            `json:"signature_name"`
	Instances     []json.RawMessage `json:"instances"`
	Inputs        json.RawMessage   `json:"inputs"`
}

// exampleRequest is the body of :classify and :regress: features shared
// by every example in context, the others in each example.
type exampleRequest struct {
	SignatureName string                     `json:"signature_name"`
	Context       map[string]json.RawMessage `json:"context"`
	Examples      []json.RawMessage          `json:"examples"`
}

// Answers of :predict, :classify and :regress begin with these.
const (
	wirePredictions = `{"predictions":[`
	wireOutputs     = `{"outputs":{`
	// wireResults opens the answer of :classify and :regress. TF Serving
	// writes "results" (json_tensor.cc, kClassifyRegressResponseKey), as
	// the curl example of its REST API page shows; the page's format
	// section says "result".
	wireResults = `{"results":[`
)

// modelList is the answer of GET /v1/models, an extension of TF Serving
// (which answers 400 there).
type modelList struct {
	Models []modelEntry `json:"models"`
}

type modelEntry struct {
	Name     string  `json:"name"`
	Versions []int64 `json:"versions"`
	Default  int64   `json:"default"`
}

// modelStatus is TF Serving's GetModelStatusResponse.
type modelStatus struct {
	ModelVersionStatus []versionStatus `json:"model_version_status"`
}

type versionStatus struct {
	Version string      `json:"version"`
	State   string      `json:"state"`
	Status  statusProto `json:"status"`
}

type statusProto struct {
	ErrorCode    string `json:"error_code"`
	ErrorMessage string `json:"error_message"`
}

// stateAvailable and codeOK describe every loaded version: a version is
// loaded whole or not at all.
const (
	stateAvailable = "AVAILABLE"
	codeOK         = "OK"
)

// modelMetadata is TF Serving's GetModelMetadataResponse: a signature_def
// entry as TF Serving writes it, and trainflow's own description of the
// model under the key "trainflow" of the same map.
type modelMetadata struct {
	ModelSpec modelSpec   `json:"model_spec"`
	Metadata  metadataMap `json:"metadata"`
}

type modelSpec struct {
	Name          string `json:"name"`
	SignatureName string `json:"signature_name"`
	Version       string `json:"version"`
}

type metadataMap struct {
	SignatureDef signatureDefMap `json:"signature_def"`
	Trainflow    trainflowMeta   `json:"trainflow"`
}

type signatureDefMap struct {
	SignatureDef map[string]signatureDef `json:"signature_def"`
}

type signatureDef struct {
	Inputs     map[string]tensorInfo `json:"inputs"`
	Outputs    map[string]tensorInfo `json:"outputs"`
	MethodName string                `json:"method_name"`
	Defaults   map[string]any        `json:"defaults"`
}

type tensorInfo struct {
	Dtype       string      `json:"dtype"`
	TensorShape tensorShape `json:"tensor_shape"`
	Name        string      `json:"name"`
}

type tensorShape struct {
	Dim         []tensorDim `json:"dim"`
	UnknownRank bool        `json:"unknown_rank"`
}

type tensorDim struct {
	Size string `json:"size"` // an int64, which proto3 JSON writes as a string
	Name string `json:"name"`
}

// trainflowMeta is what a client of trainflow needs beyond TF Serving's
// signature: the raw inputs with their types and defaults, the classes
// (a classifier) or the label (a regressor), and where the model comes
// from.
type trainflowMeta struct {
	Inputs        []preprocess.Input `json:"inputs"`
	Classes       []string           `json:"classes,omitempty"`
	ProblemType   string             `json:"problem_type,omitempty"`
	Label         string             `json:"label,omitempty"`
	GlobalStep    int64              `json:"global_step"`
	Metrics       train.Metrics      `json:"metrics"`
	JobID         string             `json:"job_id"`
	TransformHash string             `json:"transform_hash"`
}

// problemRegression is trainflowMeta.ProblemType of a regressor.
const problemRegression = "regression"

// TF Serving method names of the signatures.
const (
	methodPredict  = "tensorflow/serving/predict"
	methodClassify = "tensorflow/serving/classify"
	methodRegress  = "tensorflow/serving/regress"
)

// V2 answers.

// v2ServerMetadata is the answer of GET /v2.
type v2ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// v2ServerName is v2ServerMetadata.Name.
const v2ServerName = "trainflow"

type v2Output struct {
	Name     string  `json:"name"`
	Shape    []int64 `json:"shape"`
	Datatype string  `json:"datatype"`
	Data     any     `json:"data"`
}

type v2Response struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version"`
	ID           string     `json:"id,omitempty"`
	Outputs      []v2Output `json:"outputs"`
}

type v2TensorMeta struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type v2ModelMetadata struct {
	Name     string         `json:"name"`
	Versions []string       `json:"versions"`
	Platform string         `json:"platform"`
	Inputs   []v2TensorMeta `json:"inputs"`
	Outputs  []v2TensorMeta `json:"outputs"`
}

type v2ModelReady struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
}

// v2Platform is v2ModelMetadata.Platform.
const v2Platform = "trainflow"

// headerInferenceHeaderLength is the header of the V2 binary tensor
// extension: the length of the JSON part of a body that binary data
// follows.
const headerInferenceHeaderLength = "Inference-Header-Content-Length"
