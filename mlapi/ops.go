package mlapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// Operation is google.longrunning.Operation as Cloud ML Engine answered
// it: a ModelOperation workflow, name projects/P/operations/ID (ID its
// workflow ID).
type Operation struct {
	Name     string             `json:"name"`
	Metadata *OperationMetadata `json:"metadata,omitempty"`
	Done     bool               `json:"done,omitempty"`
	Error    *Status            `json:"error,omitempty"`
	Response map[string]any     `json:"response,omitempty"`
}

// OperationMetadata is Cloud ML Engine's OperationMetadata.
type OperationMetadata struct {
	Type                    string   `json:"@type"`
	CreateTime              string   `json:"createTime,omitempty"`
	StartTime               string   `json:"startTime,omitempty"`
	EndTime                 string   `json:"endTime,omitempty"`
	IsCancellationRequested bool     `json:"isCancellationRequested,omitempty"`
	OperationType           string   `json:"operationType"`
	ModelName               string   `json:"modelName,omitempty"`
	Version                 *Version `json:"version,omitempty"`
}

// Status is google.rpc.Status: an operation's error, code a gRPC code.
type Status struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Type URLs of the Any values an Operation carries.
const (
	typeOpMetadata = "type.googleapis.com/google.cloud.ml.v1.OperationMetadata"
	typeVersion    = "type.googleapis.com/google.cloud.ml.v1.Version"
	typeEmpty      = "type.googleapis.com/google.protobuf.Empty"
)

// opTypes are Cloud ML Engine's OperationType of each ModelOperation
// kind.
var opTypes = map[string]string{
	workflows.ModelOpCreateModel:   "OPERATION_TYPE_UNSPECIFIED",
	workflows.ModelOpDeleteModel:   "DELETE_MODEL",
	workflows.ModelOpCreateVersion: "CREATE_VERSION",
	workflows.ModelOpDeleteVersion: "DELETE_VERSION",
	workflows.ModelOpSetDefault:    "UPDATE_MODEL",
	workflows.ModelOpUpdateModel:   "UPDATE_MODEL",
	workflows.ModelOpUpdateVersion: "UPDATE_VERSION",
}

// modelRequest is a Model as models.create takes it: name, description
// and labels are read; the other fields the reference lists are
// accepted and ignored.
type modelRequest struct {
	Name                           string            `json:"name"`
	Description                    string            `json:"description"`
	Labels                         map[string]string `json:"labels"`
	Regions                        []string          `json:"regions"`
	OnlinePredictionLogging        bool              `json:"onlinePredictionLogging"`
	OnlinePredictionConsoleLogging bool              `json:"onlinePredictionConsoleLogging"`
	DefaultVersion                 json.RawMessage   `json:"defaultVersion"`
	Etag                           string            `json:"etag"`
}

// versionRequest is a Version as versions.create takes it: name and
// deploymentUri are read; runtime and machine fields are accepted and
// ignored (trainflow serves every version it loads the same way).
type versionRequest struct {
	Name                 string            `json:"name"`
	Description          string            `json:"description"`
	DeploymentURI        string            `json:"deploymentUri"`
	RuntimeVersion       string            `json:"runtimeVersion"`
	Framework            string            `json:"framework"`
	PythonVersion        string            `json:"pythonVersion"`
	MachineType          string            `json:"machineType"`
	Labels               map[string]string `json:"labels"`
	AutoScaling          json.RawMessage   `json:"autoScaling"`
	ManualScaling        json.RawMessage   `json:"manualScaling"`
	AcceleratorConfig    json.RawMessage   `json:"acceleratorConfig"`
	PackageURIs          []string          `json:"packageUris"`
	PredictionClass      string            `json:"predictionClass"`
	ServiceAccount       string            `json:"serviceAccount"`
	RequestLoggingConfig json.RawMessage   `json:"requestLoggingConfig"`
	IsDefault            bool              `json:"isDefault"`
	Etag                 string            `json:"etag"`
}

// maxDescription bounds a model's description.
const maxDescription = 4096

// createModel is projects.models.create: the model is made by a
// ModelOperation on a worker (its user: the caller), waited for.
func (a *API) createModel(c echo.Context) error {
	project, err := a.project(c)
	if err != nil {
		return err
	}
	var req modelRequest
	if err := a.decodeBody(c, &req); err != nil {
		return err
	}
	if err := ident.Check(req.Name); err != nil {
		return invalid("name: %v (a model name is letters, digits and '_', starting with a letter, at most %d)", err, ident.MaxLen)
	}
	if len(req.Description) > maxDescription {
		return invalid("description: %d bytes, at most %d", len(req.Description), maxDescription)
	}
	if err := checkLabels(req.Labels); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	if _, err := a.runOp(ctx, workflows.ModelOpInput{Kind: workflows.ModelOpCreateModel, Project: project, Model: req.Name,
		Description: req.Description, Labels: req.Labels}); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, modelOf(project, req.Name, req.Description, req.Labels, nil))
}

// postModel answers the POSTs under models/: :predict (the prediction
// server's errors), versions.create (models/M/versions) and
// versions.setDefault (models/M/versions/V:setDefault).
func (a *API) postModel(c echo.Context) error {
	rest, method := splitMethod(c.Param("*"))
	if method == "predict" {
		return a.predict(c)
	}
	return a.handle(func(c echo.Context) error {
		project, err := a.project(c)
		if err != nil {
			return err
		}
		model, sub, _ := strings.Cut(rest, "/")
		v, isVersion := strings.CutPrefix(sub, "versions/")
		switch {
		case method == "" && sub == "versions":
			return a.createVersion(c, project, model)
		case method == "setDefault" && isVersion:
			return a.setDefault(c, project, model, v)
		}
		return notFound("POST models/%s: not a method of models (:predict, versions, versions/{v}:setDefault are)", clip(c.Param("*")))
	})(c)
}

// createVersion is projects.models.versions.create: a ModelOperation
// publishes the export deploymentUri names, answered as its Operation.
func (a *API) createVersion(c echo.Context, project, model string) error {
	if err := ident.Check(model); err != nil {
		return notFound("model %q: no such model", clip(model))
	}
	var req versionRequest
	if err := a.decodeBody(c, &req); err != nil {
		return err
	}
	if err := ident.Check(req.Name); err != nil {
		return invalid("name: %v (a version name is letters, digits and '_', starting with a letter)", err)
	}
	if req.DeploymentURI == "" {
		return invalid("deploymentUri: required: the export of one of your jobs (export/<exporter>/<step> of its job directory)")
	}
	if len(req.DeploymentURI) > 4096 || strings.ContainsAny(req.DeploymentURI, "\x00\n\r") {
		return invalid("deploymentUri: at most 4096 bytes, one line")
	}
	if ms, err := a.models(); err == nil {
		if _, ok := ms.Labels(model)[req.Name]; ok {
			return &apiError{code: http.StatusConflict, status: "ALREADY_EXISTS", msg: fmt.Sprintf("name: model %s has a version named %s", model, req.Name)}
		}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	return a.startedOp(c, ctx, project, workflows.ModelOpInput{Kind: workflows.ModelOpCreateVersion, Project: project, Model: model,
		Version: req.Name, DeploymentURI: req.DeploymentURI})
}

// setDefault is projects.models.versions.setDefault, waited for.
func (a *API) setDefault(c echo.Context, project, model, v string) error {
	if err := ident.Check(model); err != nil {
		return notFound("model %q: no such model", clip(model))
	}
	if ident.Check(v) != nil && !workflows.IsVersionNumber(v) {
		return notFound("version %q: no such version", clip(v))
	}
	if err := a.emptyBody(c); err != nil { // SetDefaultVersionRequest: {}
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	res, err := a.runOp(ctx, workflows.ModelOpInput{Kind: workflows.ModelOpSetDefault, Project: project, Model: model, Version: v})
	if err != nil {
		return err
	}
	name := res.Name
	if name == "" {
		name = itoa(res.Version)
	}
	ver := modelName(project, model) + "/versions/" + name
	return c.JSON(http.StatusOK, &Version{Name: ver, IsDefault: true, State: versionReady, Etag: versionEtag(ver, true)})
}

// deleteModel answers the DELETEs under models/: models.delete
// (models/M) and versions.delete (models/M/versions/V), as Operations.
// What cannot be deleted (a model with versions, the default version)
// is refused before anything starts, as the worker refuses it again.
func (a *API) deleteModel(c echo.Context) error {
	p, err := a.parseModelPath(c, "DELETE", "")
	if err != nil {
		return err
	}
	project, model, sub, hasSub, rest := p.project, p.model, p.sub, p.hasSub, c.Param("*")
	ms, err := a.models()
	if err != nil {
		return err
	}
	vs, def, statusErr := ms.Status(model)
	_, created := ms.Info(model)
	if statusErr != nil && !created {
		return notFound("model %s not found", model)
	}
	in := workflows.ModelOpInput{Kind: workflows.ModelOpDeleteModel, Project: project, Model: model}
	if hasSub {
		v, ok := strings.CutPrefix(sub, "versions/")
		if !ok || strings.Contains(v, "/") {
			return notFound("DELETE models/%s: want models/{model} or models/{model}/versions/{version}", clip(rest))
		}
		n, found := bundle.VersionByName(v, vs, ms.Labels(model))
		if !found {
			return notFound("version %s of model %s not found", clip(v), model)
		}
		if n == def {
			return &apiError{code: http.StatusBadRequest, status: "FAILED_PRECONDITION", msg: fmt.Sprintf("version %s is model %s's default: set another default first (versions.setDefault)", v, model)}
		}
		in.Kind, in.Version = workflows.ModelOpDeleteVersion, v
	} else if len(vs) > 0 {
		return &apiError{code: http.StatusBadRequest, status: "FAILED_PRECONDITION", msg: fmt.Sprintf("model %s has %d versions: delete them first", model, len(vs))}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	return a.startedOp(c, ctx, project, in)
}

// startedOp starts in and answers its Operation, not done.
func (a *API) startedOp(c echo.Context, ctx context.Context, project string, in workflows.ModelOpInput) error {
	run, err := jobs.StartModelOp(ctx, a.opts.Client, in)
	if err != nil {
		return startError(in.Model, err)
	}
	op, err := a.operation(ctx, project, run.GetID())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, op)
}

// runOp starts in and waits for its result: a refusal is answered as
// the worker worded it, with the HTTP status of its kind.
func (a *API) runOp(ctx context.Context, in workflows.ModelOpInput) (workflows.ModelOpResult, error) {
	var res workflows.ModelOpResult
	run, err := jobs.StartModelOp(ctx, a.opts.Client, in)
	if err != nil {
		return res, startError(in.Model, err)
	}
	if err := run.Get(ctx, &res); err != nil {
		if ctx.Err() != nil {
			return res, &apiError{code: http.StatusServiceUnavailable, status: "UNAVAILABLE",
				msg: fmt.Sprintf("operation %s is queued, and no worker made it within %s: retry operations.get later", run.GetID(), callTimeout)}
		}
		st := opStatus(err)
		return res, &apiError{code: httpOf[st.Code], status: grpcNames[st.Code], msg: st.Message}
	}
	return res, nil
}

// gRPC codes of the operations' errors, their names and HTTP statuses.
const (
	codeInvalid      = 3
	codeNotFound     = 5
	codeExists       = 6
	codePermission   = 7
	codePrecondition = 9
	codeInternal     = 13
	codeCancelled    = 1
)

var (
	grpcNames = map[int]string{codeInvalid: "INVALID_ARGUMENT", codeNotFound: "NOT_FOUND", codeExists: "ALREADY_EXISTS",
		codePermission: "PERMISSION_DENIED", codePrecondition: "FAILED_PRECONDITION", codeInternal: "INTERNAL", codeCancelled: "CANCELLED"}
	httpOf = map[int]int{codeInvalid: 400, codeNotFound: 404, codeExists: 409, codePermission: 403, codePrecondition: 400, codeInternal: 500, codeCancelled: 499}
)

// opStatus is the google.rpc.Status of a failed operation: the code of
// the activity's error type, its message (a worker's, with no content of
// any file).
func opStatus(err error) *Status {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		code := codeInternal
		switch ae.Type() {
		case workflows.ErrTypeModelNotFound:
			code = codeNotFound
		case workflows.ErrTypeModelConflict:
			code = codeExists
		case workflows.ErrTypeModelInUse:
			code = codePrecondition
		case workflows.ErrTypeModelOwned, workflows.ErrTypeNotOwner:
			code = codePermission
		case workflows.ErrTypeInvalidSpec:
			code = codeInvalid
		}
		// A worker's refusal of a location says "invalid job spec": here
		// the field is the request's.
		return &Status{Code: code, Message: strings.TrimPrefix(ae.Message(), jobspec.ErrInvalid.Error()+": ")}
	}
	var ce *temporal.CanceledError
	if errors.As(err, &ce) {
		return &Status{Code: codeCancelled, Message: "cancelled"}
	}
	return &Status{Code: codeInternal, Message: "the operation failed: " + clip(err.Error())}
}

// operation reads operation id (a ModelOperation workflow) from
// Temporal: its input (the first event's), state and result.
func (a *API) operation(ctx context.Context, project, id string) (*Operation, error) {
	d, err := a.opts.Client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, notFound("operation %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != workflows.ModelOperationName {
		return nil, notFound("operation %s not found (workflow %s is not an operation)", id, info.GetType().GetName())
	}
	var in workflows.ModelOpInput
	it := a.opts.Client.GetWorkflowHistory(ctx, id, info.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, err
		}
		if p := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads(); len(p) > 0 {
			_ = converter.GetDefaultDataConverter().FromPayload(p[0], &in) // a client's: shown as far as it decodes
		}
	}
	op := &Operation{Name: "projects/" + project + "/operations/" + id, Metadata: &OperationMetadata{Type: typeOpMetadata,
		CreateTime: rfc3339(info.GetStartTime().AsTime()), StartTime: rfc3339(info.GetStartTime().AsTime()),
		OperationType: opTypes[in.Kind], IsCancellationRequested: d.GetWorkflowExtendedInfo().GetCancelRequested()}}
	if op.Metadata.OperationType == "" {
		op.Metadata.OperationType = "OPERATION_TYPE_UNSPECIFIED"
	}
	if ident.Valid(in.Model) {
		op.Metadata.ModelName = modelName(project, in.Model)
		if in.Version != "" && (ident.Valid(in.Version) || workflows.IsVersionNumber(in.Version)) {
			op.Metadata.Version = &Version{Name: op.Metadata.ModelName + "/versions/" + in.Version, State: "CREATING"}
		}
	}
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return op, nil
	}
	op.Done = true
	op.Metadata.EndTime = rfc3339(info.GetCloseTime().AsTime())
	var res workflows.ModelOpResult
	err = a.opts.Client.GetWorkflow(ctx, id, info.GetExecution().GetRunId()).Get(ctx, &res)
	if err != nil {
		op.Error = opStatus(err)
		if op.Metadata.Version != nil {
			op.Metadata.Version.State = "FAILED"
		}
		return op, nil
	}
	switch in.Kind {
	case workflows.ModelOpCreateVersion, workflows.ModelOpSetDefault:
		v := op.Metadata.Version
		v.State, v.IsDefault = versionReady, res.Default
		v.Etag = versionEtag(v.Name, res.Default)
		op.Response = map[string]any{"@type": typeVersion, "name": v.Name, "isDefault": res.Default, "state": versionReady, "deploymentUri": in.DeploymentURI, "etag": v.Etag}
	default:
		op.Response = map[string]any{"@type": typeEmpty}
	}
	return op, nil
}

// getOperation is projects.operations.get.
func (a *API) getOperation(c echo.Context) error {
	project, err := a.project(c)
	if err != nil {
		return err
	}
	id, method := splitMethod(c.Param("*"))
	if method != "" {
		return notFound("GET operations/%s: not served (operations.get is)", clip(c.Param("*")))
	}
	if err := ident.Check(id); err != nil {
		return notFound("operation %q: no such operation", clip(id))
	}
	if err := checkQuery(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	op, err := a.operation(ctx, project, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, op)
}

// operationList is google.longrunning.ListOperationsResponse.
type operationList struct {
	Operations    []*Operation `json:"operations"`
	NextPageToken string       `json:"nextPageToken,omitempty"`
}

// listOperations is projects.operations.list: the ModelOperation
// workflows, newest first, pages of Temporal's visibility (the page
// token is Temporal's, which refuses a forged one).
func (a *API) listOperations(c echo.Context) error {
	project, err := a.project(c)
	if err != nil {
		return err
	}
	size, err := listPage(c, "operations.list", "")
	if err != nil {
		return err
	}
	var token []byte
	if t := c.QueryParam("pageToken"); t != "" {
		if token, err = base64.RawURLEncoding.DecodeString(t); err != nil || len(token) > 4096 {
			return invalid("pageToken: not a page token of operations.list")
		}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	resp, err := a.opts.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: a.opts.Namespace,
		PageSize: int32(size), NextPageToken: token, Query: fmt.Sprintf("WorkflowType = '%s'", workflows.ModelOperationName)})
	var bad *serviceerror.InvalidArgument
	if errors.As(err, &bad) {
		return invalid("pageToken: not a page token of operations.list")
	}
	if err != nil {
		return err
	}
	out := operationList{Operations: []*Operation{}}
	for _, e := range resp.GetExecutions() {
		if op, err := a.operation(ctx, project, e.GetExecution().GetWorkflowId()); err == nil {
			out.Operations = append(out.Operations, op)
		}
	}
	if t := resp.GetNextPageToken(); len(t) > 0 {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString(t)
	}
	return c.JSON(http.StatusOK, out)
}

// patchModel answers the PATCHes under models/: models.patch (models/M,
// updateMask description and/or labels) and versions.patch
// (models/M/versions/V, updateMask description), as Operations.
func (a *API) patchModel(c echo.Context) error {
	p, err := a.parseModelPath(c, "PATCH", "")
	if err != nil {
		return err
	}
	project, model, sub, hasSub, rest := p.project, p.model, p.sub, p.hasSub, c.Param("*")
	if err := checkQuery(c, "updateMask"); err != nil {
		return err
	}
	var mask []string
	for f := range strings.SplitSeq(c.QueryParam("updateMask"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			mask = append(mask, f)
		}
	}
	b, err := a.body(c)
	if err != nil {
		return err
	}
	in := workflows.ModelOpInput{Kind: workflows.ModelOpUpdateModel, Project: project, Model: model, UpdateMask: mask}
	allowed := []string{"description", "labels"}
	if hasSub {
		v, ok := strings.CutPrefix(sub, "versions/")
		if !ok || strings.Contains(v, "/") || (ident.Check(v) != nil && !workflows.IsVersionNumber(v)) {
			return notFound("PATCH models/%s: want models/{model} or models/{model}/versions/{version}", clip(rest))
		}
		var req versionRequest
		if err := decodeStrict(b, &req); err != nil {
			return err
		}
		in.Kind, in.Version, in.Description, allowed = workflows.ModelOpUpdateVersion, v, req.Description, []string{"description"}
	} else {
		var req modelRequest
		if err := decodeStrict(b, &req); err != nil {
			return err
		}
		if err := checkLabels(req.Labels); err != nil {
			return err
		}
		in.Description, in.Labels = req.Description, req.Labels
	}
	if len(mask) == 0 {
		return invalid("updateMask: required; want %s", strings.Join(allowed, ","))
	}
	for _, f := range mask {
		if !slices.Contains(allowed, f) {
			return invalid("updateMask %q: only %s can change here", clip(f), strings.Join(allowed, ", "))
		}
	}
	if len(in.Description) > maxDescription {
		return invalid("description: %d bytes, at most %d", len(in.Description), maxDescription)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	return a.startedOp(c, ctx, project, in)
}
