package mlapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// DefaultMaxBodyBytes bounds a request body of the jobs methods: a Job
// is a few kilobytes (trainer packages are not uploaded through it).
const DefaultMaxBodyBytes = 256 << 10

// callTimeout bounds the Temporal calls of one request.
const callTimeout = 30 * time.Second

// Predictor answers a :predict request as the prediction server's
// POST /v1/models/MODEL[/versions/VERSION]:predict does (version 0: the
// model's default); serving.Server is one.
type Predictor interface {
	Predict(c echo.Context, model string, version int64) error
}

// Options configures an API.
type Options struct {
	// Client is the Temporal client jobs are started, read and
	// cancelled through (a lazy one connects on the first request).
	Client    client.Client
	Namespace string
	// Projects are the project IDs served; empty: any project ID is
	// accepted (jobs are one namespace whatever the project).
	Projects []string
	// Models are the models the prediction server serves, read by the
	// models and versions methods (nil: those answer 503).
	Models Models
	// Packages reads the trainer package a job's trainingInput.packageUris
	// names, from inside the operator's roots (nil: packageUris is
	// refused).
	Packages jobs.PackageLoader
	// MaxBodyBytes bounds a jobs request body (0: DefaultMaxBodyBytes);
	// a larger one is answered 413.
	MaxBodyBytes int64
	Logger       *slog.Logger
}

// API is the ml/v1 surface. Its handlers are safe for concurrent use.
type API struct {
	opts      Options
	log       *slog.Logger
	predictor Predictor
}

// New returns the API for opts. Its predict methods answer once
// PredictWith names the server.
func New(opts Options) *API {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &API{opts: opts, log: log.With("component", "mlapi")}
}

// PredictWith makes p answer the predict methods. The prediction server
// mounts the API's routes while it is built (serving.Options.Routes), so
// it is named here afterwards, before it serves.
func (a *API) PredictWith(p Predictor) { a.predictor = p }

// Route patterns. The job and model segments end in a custom method
// (":cancel", ":predict"), which Echo's router cannot split: those
// routes take the rest of the path and parse it.
const (
	routeJobs    = "/v1/projects/:project/jobs"
	routeJob     = "/v1/projects/:project/jobs/*"
	routeModels  = "/v1/projects/:project/models"
	routeModel   = "/v1/projects/:project/models/*"
	routeProject = "/v1/projects/*"

	routeOperations = "/v1/projects/:project/operations"
	routeOperation  = "/v1/projects/:project/operations/*"
)

// Routes mounts the API on e (serving.Options.Routes): the server's
// middleware (auth, limits, logs) applies.
func (a *API) Routes(e *echo.Echo) {
	e.POST(routeJobs, a.handle(a.create))
	e.GET(routeJobs, a.handle(a.list))
	e.GET(routeJob, a.handle(a.get))
	e.POST(routeJob, a.handle(a.cancel))
	e.PATCH(routeJob, a.handle(a.patch))
	e.GET(routeDiscovery, a.discoveryDoc)
	e.POST(routeModels, a.handle(a.createModel))
	e.GET(routeModels, a.handle(a.listModels))
	e.POST(routeModel, a.postModel)
	e.GET(routeModel, a.handle(a.getModel))
	e.DELETE(routeModel, a.handle(a.deleteModel))
	e.GET(routeOperations, a.handle(a.listOperations))
	e.GET(routeOperation, a.handle(a.getOperation))
	// jobs.delete does not exist; operations.cancel and delete are not
	// served.
	e.Match([]string{http.MethodDelete, http.MethodPut}, routeJob, a.handle(notServed))
	e.PATCH(routeModel, a.handle(a.patchModel))
	e.PUT(routeModel, a.handle(notServed))
	e.Any(routeProject, a.handle(notServed))
}

// notServed answers a method of ml/v1 this server does not serve.
func notServed(c echo.Context) error {
	return notFound("%s %s: not served by trainflow (yet); docs/ml-api.md lists the ml/v1 methods served", c.Request().Method, c.Request().URL.Path)
}

// handle writes h's error in Google's shape.
func (a *API) handle(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := h(c)
		if err == nil {
			return nil
		}
		var ae *apiError
		if !errors.As(err, &ae) {
			a.log.Error("ml/v1 request failed", "uri", c.Request().URL.Path, "error", err)
			ae = &apiError{code: http.StatusInternalServerError, status: "INTERNAL", msg: "internal error"}
		}
		return c.JSON(ae.code, errorBody{Error: errorDetail{Code: ae.code, Message: ae.msg, Status: ae.status}})
	}
}

// project returns the request's project ID, or a 404 for one not served.
func (a *API) project(c echo.Context) (string, error) {
	p := c.Param("project")
	if !projectID.MatchString(p) {
		return "", notFound("project %q: want a project ID (letters, digits, '-', '_', '.', ':')", p)
	}
	if len(a.opts.Projects) > 0 && !slices.Contains(a.opts.Projects, p) {
		return "", notFound("project %q is not served here (the server's --ml-projects)", p)
	}
	return p, nil
}

// projectID is what a project segment may be.
var projectID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// ValidProject reports why p cannot be a project ID of --ml-projects.
func ValidProject(p string) error {
	if !projectID.MatchString(p) {
		return fmt.Errorf("project %q: want letters, digits, '-', '_', '.' or ':', at most 100", p)
	}
	return nil
}

// body reads the request body within the bound: 413 over it.
func (a *API) body(c echo.Context) ([]byte, error) {
	r := c.Request()
	if r.ContentLength > a.opts.MaxBodyBytes {
		return nil, tooLarge(a.opts.MaxBodyBytes)
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, a.opts.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge(a.opts.MaxBodyBytes)
	}
	if err != nil {
		return nil, invalid("request body: %v", err)
	}
	return b, nil
}

// jobRequest is the Job a create sends: the fields a client sets.
type jobRequest struct {
	JobID           string            `json:"jobId"`
	Labels          map[string]string `json:"labels"`
	TrainingInput   json.RawMessage   `json:"trainingInput"`
	PredictionInput json.RawMessage   `json:"predictionInput"`
}

// invalidSpec is the 400 of a job input that does not map or validate:
// err's message (the field's path first) after prefix, without
// jobspec.ErrInvalid's words.
func invalidSpec(prefix string, err error) error {
	return invalid("%s%s", prefix, strings.TrimPrefix(err.Error(), jobspec.ErrInvalid.Error()+": "))
}

// decodeBody reads the request's body (bounded, see body) and decodes
// it strictly into v.
func (a *API) decodeBody(c echo.Context, v any) error {
	b, err := a.body(c)
	if err != nil {
		return err
	}
	return decodeStrict(b, v)
}

// emptyBody reads a body that is an empty message ({}) or nothing, as
// the custom methods :cancel and :setDefault take.
func (a *API) emptyBody(c echo.Context) error {
	b, err := a.body(c)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return err
	}
	var req struct{}
	return decodeStrict(b, &req)
}

// decodeStrict decodes b into v by the rules of job specs: every key a
// field, every value of its type; the error names the field and
// suggests the key meant.
func decodeStrict(b []byte, v any) error {
	if err := jobspec.DecodeStrict(b, v); err != nil {
		return invalidSpec("", err)
	}
	return nil
}

// create is projects.jobs.create.
func (a *API) create(c echo.Context) error {
	project, err := a.project(c)
	if err != nil {
		return err
	}
	var req jobRequest
	if err := a.decodeBody(c, &req); err != nil {
		return err
	}
	if err := ident.Check(req.JobID); err != nil {
		return invalid("jobId: %v (letters, digits and '_', starting with a letter, at most %d)", err, ident.MaxLen)
	}
	if err := checkLabels(req.Labels); err != nil {
		return err
	}
	meta := &jobs.Meta{Project: project, Labels: req.Labels}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	var warnings []string
	switch hasT, hasP := present(req.TrainingInput), present(req.PredictionInput); {
	case hasT == hasP:
		return invalid("trainingInput, predictionInput: want exactly one")
	case hasT:
		spec, w, err := jobs.FromTrainingInput(req.TrainingInput, a.opts.Packages)
		if err != nil {
			return invalidSpec("", err)
		}
		spec.JobID, warnings, meta.TrainingInput = req.JobID, w, req.TrainingInput
		if d := spec.WithDefaults(); d.Validate() != nil {
			return invalidSpec("trainingInput: ", d.Validate())
		}
		if _, err := jobs.StartWithMeta(ctx, a.opts.Client, spec, meta); err != nil {
			return startError(req.JobID, err)
		}
	default:
		spec, w, err := jobs.FromPredictionInput(req.PredictionInput)
		if err != nil {
			return invalidSpec("", err)
		}
		spec.JobID, warnings, meta.PredictionInput = req.JobID, w, req.PredictionInput
		if err := spec.WithDefaults().Validate(); err != nil {
			return invalidSpec("predictionInput: ", err)
		}
		if _, err := jobs.StartBatchWithMeta(ctx, a.opts.Client, spec, meta); err != nil {
			return startError(req.JobID, err)
		}
	}
	for _, w := range warnings {
		a.log.Info("ml/v1 job input ignored", "job_id", req.JobID, "warning", w)
	}
	job, err := a.job(ctx, req.JobID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, job)
}

// present reports whether a JSON field was sent with a value.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// startError is the answer to a start that failed.
func startError(id string, err error) error {
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	var unavailable *serviceerror.Unavailable
	switch {
	case errors.As(err, &exists):
		return &apiError{code: http.StatusConflict, status: "ALREADY_EXISTS", msg: fmt.Sprintf("jobId %s: a job of this ID exists already (job IDs are unique; pick another)", id)}
	case errors.Is(err, jobspec.ErrInvalid):
		return invalidSpec("", err)
	case errors.As(err, &unavailable):
		return &apiError{code: http.StatusServiceUnavailable, status: "UNAVAILABLE", msg: "the job service (Temporal) cannot be reached; retry"}
	}
	return err
}

// checkLabels refuses labels Cloud ML Engine refused (jobspec.CheckLabels).
func checkLabels(labels map[string]string) error {
	if err := jobspec.CheckLabels(labels); err != nil {
		return invalid("%s", err.Error())
	}
	return nil
}

// get is projects.jobs.get.
func (a *API) get(c echo.Context) error {
	if _, err := a.project(c); err != nil {
		return err
	}
	id, method := splitMethod(c.Param("*"))
	if method != "" {
		return notFound("GET :%s: not a method of jobs (POST :cancel is)", clip(method))
	}
	if err := ident.Check(id); err != nil {
		return notFound("job %q: no such job (a job ID is letters, digits and '_')", clip(id))
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	job, err := a.job(ctx, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, job)
}

// job reads job id from Temporal.
func (a *API) job(ctx context.Context, id string) (*Job, error) {
	d, err := jobs.Describe(ctx, a.opts.Client, a.opts.Namespace, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return nil, notFound("job %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	if !isJob(d.Workflow) {
		return nil, notFound("job %s not found (workflow %s is not a job)", id, d.Workflow)
	}
	return jobOf(d), nil
}

// isJob reports whether a workflow type is one the jobs methods show.
func isJob(workflow string) bool {
	switch workflow {
	case workflows.TrainingJobName, workflows.HyperparameterTuningJobName, workflows.BatchPredictionJobName:
		return true
	}
	return false
}

// splitMethod splits "NAME:method" (the custom-method suffix).
func splitMethod(s string) (name, method string) {
	name, method, _ = strings.Cut(s, ":")
	return name, method
}

// cancel is projects.jobs.cancel.
func (a *API) cancel(c echo.Context) error {
	if _, err := a.project(c); err != nil {
		return err
	}
	id, method := splitMethod(c.Param("*"))
	if method != "cancel" {
		return notFound("POST %s: want jobs/{jobId}:cancel", clip(c.Param("*")))
	}
	if err := ident.Check(id); err != nil {
		return notFound("job %q: no such job (a job ID is letters, digits and '_')", clip(id))
	}
	if err := a.emptyBody(c); err != nil { // CancelJobRequest: {}
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), callTimeout)
	defer cancel()
	run, err := jobs.MeaningfulRun(ctx, a.opts.Client, a.opts.Namespace, id)
	if errors.Is(err, jobs.ErrNotFound) || (err == nil && !isJob(run.GetType().GetName())) {
		return notFound("job %s not found", id)
	}
	if err != nil {
		return err
	}
	_, err = jobs.Cancel(ctx, a.opts.Client, a.opts.Namespace, id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return notFound("job %s not found", id)
	case errors.Is(err, jobs.ErrEnded):
		return &apiError{code: http.StatusBadRequest, status: "FAILED_PRECONDITION", msg: err.Error()}
	case err != nil:
		return err
	}
	return c.JSON(http.StatusOK, struct{}{})
}

// predict is projects.predict: models/{m}:predict and
// models/{m}/versions/{v}:predict, answered by the Predictor with its
// own error body ({"error": "..."}, as Cloud ML Engine's).
func (a *API) predict(c echo.Context) error {
	if _, err := a.project(c); err != nil {
		var ae *apiError
		errors.As(err, &ae)
		return echo.NewHTTPError(ae.code, ae.msg)
	}
	rest, method := splitMethod(c.Param("*"))
	if method != "predict" {
		return a.handle(func(echo.Context) error {
			return notFound("POST models/%s: not served by trainflow (yet); models/{model}:predict is", clip(c.Param("*")))
		})(c)
	}
	model, version, hasVersion := strings.Cut(rest, "/versions/")
	var v int64
	if hasVersion {
		n, err := strconv.ParseInt(version, 10, 64)
		if l, ok := a.labels(model)[version]; ok && err != nil {
			n, err = l, nil // a version versions.create named
		}
		if err != nil || n <= 0 {
			return echo.NewHTTPError(http.StatusNotFound, fmt.Sprintf("version %q of model %s: no such version (versions.list lists them)", clip(version), clip(model)))
		}
		v = n
	}
	if a.predictor == nil {
		return echo.NewHTTPError(http.StatusServiceUnavailable, "predictions are not served here")
	}
	return a.predictor.Predict(c, model, v)
}

// labels are model's version labels, nil without models.
func (a *API) labels(model string) map[string]int64 {
	if a.opts.Models == nil {
		return nil
	}
	return a.opts.Models.Labels(model)
}

// clip bounds a client's string quoted in an error.
func clip(s string) string {
	const n = 64
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}
