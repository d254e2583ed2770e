package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/workflows"
)

// ModelOp makes a ModelOperation's change to the model repository (the
// ml/v1 API's models and versions methods), as the user who started the
// operation: the principal of its workflow's start event, which the
// Temporal server stamps (a client cannot choose it). A model's user is
// who created it (models.create), or who started the job that owns it
// (the job that published its first version). Only its user deletes it
// or its versions and sets its default; versions.create deploys only
// the export of a job its user started, and publishes it as that job
// would, under the operator's rule for the model (--model-owners):
// never another user's job's files. Refusals are non-retryable errors
// naming the field.
func (a *Activities) ModelOp(ctx context.Context, in workflows.ModelOpInput) (workflows.ModelOpResult, error) {
	defer keepAlive(ctx).Stop()
	res := workflows.ModelOpResult{Model: in.Model}
	admin, ok := a.Models.(bundle.Admin)
	if !ok || a.Models == nil {
		return res, nonRetryable(workflows.ErrTypeInvalidSpec, errors.New("this worker's model repository takes no ml/v1 model changes"))
	}
	me := a.startedBy(ctx, "")
	if me == "" {
		return res, notOwner(errors.New("the Temporal server did not say who started this operation (its principal): models and versions change only for a known user (trainflow dev and trainflow temporal-server say it)"))
	}
	info := activity.GetInfo(ctx)
	switch in.Kind {
	case workflows.ModelOpCreateModel:
		err := admin.CreateModel(ctx, in.Model, bundle.ModelInfo{Description: in.Description, Labels: in.Labels,
			CreateTime: info.StartedTime.UTC(), CreatedBy: me, Operation: info.WorkflowExecution.ID})
		if errors.Is(err, bundle.ErrExists) {
			if mi, ok, _ := admin.ModelInfo(ctx, in.Model); ok && mi.Operation == info.WorkflowExecution.ID {
				err = nil // a retry of this operation
			}
		}
		if err == nil {
			a.published(in.Model)
		}
		return res, modelError(err)
	case workflows.ModelOpDeleteModel:
		if err := a.checkModelUser(ctx, admin, in.Model, me); err != nil {
			return res, err
		}
		err := admin.DeleteModel(ctx, in.Model)
		if errors.Is(err, bundle.ErrNotFound) && info.Attempt > 1 {
			err = nil // an earlier attempt deleted it
		}
		if err == nil {
			a.published(in.Model)
		}
		return res, modelError(err)
	case workflows.ModelOpCreateVersion:
		return a.createVersion(ctx, admin, in, me)
	case workflows.ModelOpUpdateModel:
		if err := a.checkModelUser(ctx, admin, in.Model, me); err != nil {
			return res, err
		}
		err := admin.UpdateModelInfo(ctx, in.Model, func(mi *bundle.ModelInfo) {
			for _, f := range in.UpdateMask {
				switch f {
				case "description":
					mi.Description = in.Description
				case "labels":
					mi.Labels = in.Labels
				}
			}
		})
		return res, modelError(err)
	}
	if err := a.checkModelUser(ctx, admin, in.Model, me); err != nil {
		return res, err
	}
	v, name, err := a.versionOf(ctx, in.Model, in.Version)
	if err != nil {
		return res, err
	}
	res.Version, res.Name = v, name
	switch in.Kind {
	case workflows.ModelOpDeleteVersion:
		err = admin.DeleteVersion(ctx, in.Model, v)
	case workflows.ModelOpUpdateVersion:
		err = admin.UpdateModelInfo(ctx, in.Model, func(mi *bundle.ModelInfo) {
			if mi.Versions == nil {
				mi.Versions = map[string]bundle.VersionInfo{}
			}
			mi.Versions[strconv.FormatInt(v, 10)] = bundle.VersionInfo{Description: in.Description}
		})
		return res, modelError(err) // nothing served changes
	case workflows.ModelOpSetDefault:
		_, err = a.Models.Promote(ctx, in.Model, v, bundle.Cause{By: "ml-api:" + me, Verified: true, Caller: me,
			JobID: info.WorkflowExecution.ID, Run: info.WorkflowExecution.RunID, Reason: "versions.setDefault"}, time.Now())
		res.Default = err == nil
	default:
		return res, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("kind %q: unknown", in.Kind))
	}
	if err == nil {
		a.published(in.Model)
	}
	return res, modelError(err)
}

// published tells the dev stack's registry a model changed.
func (a *Activities) published(model string) {
	if a.OnPublish != nil {
		a.OnPublish(model)
	}
}

// modelError marks the repository's refusals non-retryable, by kind.
func modelError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bundle.ErrNotFound):
		return nonRetryable(workflows.ErrTypeModelNotFound, err)
	case errors.Is(err, bundle.ErrExists):
		return nonRetryable(workflows.ErrTypeModelConflict, err)
	case errors.Is(err, bundle.ErrInUse):
		return nonRetryable(workflows.ErrTypeModelInUse, err)
	case errors.Is(err, bundle.ErrNotOwner):
		return nonRetryable(workflows.ErrTypeModelOwned, err)
	}
	return err
}

// versionOf resolves a version's name (a label of the model's config)
// or number to the version, and its name.
func (a *Activities) versionOf(ctx context.Context, model, name string) (int64, string, error) {
	vs, err := a.Models.Versions(ctx, model)
	if err != nil {
		return 0, "", modelError(err)
	}
	c, err := a.Models.Config(ctx, model)
	if err != nil {
		return 0, "", err
	}
	if v, ok := bundle.VersionByName(name, vs, c.Labels); ok {
		if c.Labels[name] == v {
			return v, name, nil // named by a label of its own
		}
		return v, bundle.VersionName(v, c.Labels), nil
	}
	return 0, "", modelError(fmt.Errorf("%w: model %s has no version %s", bundle.ErrNotFound, model, name))
}

// checkModelUser refuses a change of model by user me unless me is the
// model's user (see ModelOp).
func (a *Activities) checkModelUser(ctx context.Context, admin bundle.Admin, model, me string) error {
	user, err := a.modelUser(ctx, admin, model)
	if err != nil {
		return err
	}
	if user != me {
		shown := user
		if shown == "" {
			shown = "nobody Temporal named"
		}
		return nonRetryable(workflows.ErrTypeModelOwned, fmt.Errorf("%w: model %s is %s's (who created it, or started the job that owns it), not %s's", bundle.ErrNotOwner, model, shown, me))
	}
	return nil
}

// modelUser is the principal of model's user: model.json's creator, or
// the starter of the job that owns it.
func (a *Activities) modelUser(ctx context.Context, admin bundle.Admin, model string) (string, error) {
	mi, ok, err := admin.ModelInfo(ctx, model)
	if err != nil {
		return "", err
	}
	if ok && mi.CreatedBy != "" {
		return mi.CreatedBy, nil
	}
	o, owned, err := a.Models.Owner(ctx, model)
	if err != nil {
		return "", modelError(err)
	}
	if !owned {
		if ok {
			return "", nil
		}
		return "", modelError(fmt.Errorf("%w: model %s", bundle.ErrNotFound, model))
	}
	return a.starter(ctx, o.JobID, o.FirstRunID), nil
}

// createVersion is versions.create: the export at in.DeploymentURI,
// published into in.Model as the job that made it, named in.Version.
func (a *Activities) createVersion(ctx context.Context, admin bundle.Admin, in workflows.ModelOpInput, me string) (workflows.ModelOpResult, error) {
	res := workflows.ModelOpResult{Model: in.Model, Name: in.Version}
	ms, err := a.Models.Models(ctx)
	if err != nil {
		return res, err
	}
	if !slices.Contains(ms, in.Model) {
		return res, modelError(fmt.Errorf("%w: model %s (create it with models.create first)", bundle.ErrNotFound, in.Model))
	}
	const field = "deploymentUri"
	loc := in.DeploymentURI
	located, err := a.locate(field, loc, true)
	if err != nil {
		return res, err
	}
	dir, err := enclosingJob(ctx, located)
	if err != nil {
		return res, err
	}
	key, ok := keyUnder(dir, located)
	exporter, step, isExport := jobdir.ParseExportKey(key)
	if dir == "" || !ok || !isExport || !bundle.ValidName(exporter) || !canonicalStep(step) {
		// A job directory itself, or anything else: no export.
		return res, refuseLocation(field, loc, "%s", "not an export of a job (export/<exporter>/<step> inside a job directory: jobs.get's trainingOutput.builtInAlgorithmOutput.modelPath)")
	}
	dirLoc, err := a.locate("job_dir", dir, true)
	if err != nil {
		return res, err
	}
	jd, err := a.openToClaim(ctx, dirLoc)
	if err != nil {
		return res, err
	}
	claim, err := jd.Claim(ctx)
	jd.Close()
	if err != nil {
		return res, notOwner(fmt.Errorf("%s %s: the job directory's claim: %w", field, loc, err))
	}
	// Whose export it is: a job its user started; a trial's, the user
	// who started its tuning job.
	starter := a.starter(ctx, claim.JobID, claim.FirstRunID)
	if claim.Parent != "" {
		starter = a.starter(ctx, claim.Parent, "")
	}
	if starter != me {
		return res, notOwner(fmt.Errorf("%s %s: an export of job %s, which %s started, not %s: a version is deployed only from its user's own jobs", field, loc, claim.JobID, orNobody(starter), me))
	}
	b, err := bundle.Read(ctx, located, a.ModelTypes)
	if err != nil {
		return res, nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%s %s: %w", field, loc, err))
	}
	by := bundle.Publisher{JobID: claim.JobID, FirstRunID: claim.FirstRunID}
	if claim.Parent != "" {
		by = bundle.Publisher{JobID: claim.Parent}
	}
	// A name taken by another version is refused before publishing.
	if c, err := a.Models.Config(ctx, in.Model); err != nil {
		return res, err
	} else if v, taken := c.Labels[in.Version]; taken {
		if id, _ := a.Models.VersionID(ctx, in.Model, v); id == "" || id != b.ID() {
			return res, modelError(fmt.Errorf("%w: model %s has a version named %s (version %d)", bundle.ErrExists, in.Model, in.Version, v))
		}
	}
	v, def, err := a.Models.PublishAs(ctx, in.Model, by, b, false, a.ModelOwners.For(in.Model))
	if err != nil {
		return res, modelError(err)
	}
	if err := admin.SetVersionLabel(ctx, in.Model, in.Version, v); err != nil {
		return res, modelError(err)
	}
	a.published(in.Model)
	res.Version, res.Default = v, def
	return res, nil
}

// orNobody names a principal, or says there is none.
func orNobody(p string) string {
	if p == "" {
		return "nobody Temporal named"
	}
	return p
}
