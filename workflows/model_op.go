package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/internal/ident"
)

// ModelOperationName is the workflow of one change to a model repository
// asked through Cloud ML Engine's ml/v1 API (models.create and delete,
// versions.create, delete and setDefault): the API's long-running
// Operation is this workflow (projects/P/operations/ID, ID its workflow
// ID), and its one activity (ModelOp) makes the change on a worker, as
// the user who started it (the start event's principal, which the
// Temporal server stamps).
const ModelOperationName = "ModelOperation"

// ModelOpActivity makes a ModelOperation's change.
const ModelOpActivity = "ModelOp"

// Kinds of ModelOpInput.
const (
	ModelOpCreateModel   = "create_model"
	ModelOpDeleteModel   = "delete_model"
	ModelOpCreateVersion = "create_version"
	ModelOpDeleteVersion = "delete_version"
	ModelOpSetDefault    = "set_default"
	// ModelOpUpdateModel changes a model's description and labels,
	// ModelOpUpdateVersion a version's description (the fields
	// UpdateMask names).
	ModelOpUpdateModel   = "update_model"
	ModelOpUpdateVersion = "update_version"
)

// Error types of ModelOp's refusals (non-retryable), besides
// ErrTypeModelOwned, ErrTypeNotOwner and ErrTypeInvalidSpec.
const (
	// ErrTypeModelNotFound: no such model or version.
	ErrTypeModelNotFound = "ModelNotFound"
	// ErrTypeModelConflict: the model or version name exists already.
	ErrTypeModelConflict = "ModelConflict"
	// ErrTypeModelInUse: a default version, or a model with versions,
	// was to be deleted.
	ErrTypeModelInUse = "ModelInUse"
)

// ModelOpInput is a ModelOperation's change.
type ModelOpInput struct {
	Kind string `json:"kind"`
	// Project is the ml/v1 project the change was asked in (recorded).
	Project string `json:"project,omitempty"`
	Model   string `json:"model"`
	// Version is the version's Cloud ML Engine name (a version label of
	// the model's config.json) or its number.
	Version string `json:"version,omitempty"`
	// DeploymentURI is create_version's bundle: an export
	// (export/<exporter>/<step>) of a job its user started.
	DeploymentURI string `json:"deployment_uri,omitempty"`
	// Description and Labels are create_model's.
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// UpdateMask names what update_model (description, labels) and
	// update_version (description) change.
	UpdateMask []string `json:"update_mask,omitempty"`
}

// ModelOpResult is what the change left: the model, and the version
// created or made the default.
type ModelOpResult struct {
	Model   string `json:"model"`
	Version int64  `json:"version,omitempty"`
	// Name is the version's name (its label), Default whether it is the
	// model's default now.
	Name    string `json:"name,omitempty"`
	Default bool   `json:"default,omitempty"`
}

// check refuses an input no worker should act on: the API checks the
// same, and any Temporal client may start the workflow.
func (in ModelOpInput) check() error {
	switch in.Kind {
	case ModelOpCreateModel, ModelOpDeleteModel:
	case ModelOpUpdateModel:
		if err := checkMask(in.UpdateMask, "description", "labels"); err != nil {
			return err
		}
	case ModelOpUpdateVersion:
		if err := checkMask(in.UpdateMask, "description"); err != nil {
			return err
		}
		if err := ident.Check(in.Version); err != nil && !IsVersionNumber(in.Version) {
			return fmt.Errorf("version %q: %v", in.Version, err)
		}
	case ModelOpCreateVersion:
		if in.DeploymentURI == "" {
			return fmt.Errorf("deployment_uri: required")
		}
		fallthrough
	case ModelOpDeleteVersion, ModelOpSetDefault:
		if err := ident.Check(in.Version); err != nil && !IsVersionNumber(in.Version) {
			return fmt.Errorf("version %q: %v", in.Version, err)
		}
	default:
		return fmt.Errorf("kind %q: want %s, %s, %s, %s, %s, %s or %s", in.Kind, ModelOpCreateModel, ModelOpDeleteModel, ModelOpUpdateModel,
			ModelOpCreateVersion, ModelOpDeleteVersion, ModelOpSetDefault, ModelOpUpdateVersion)
	}
	if err := ident.Check(in.Model); err != nil {
		return fmt.Errorf("model %q: %v", in.Model, err)
	}
	return nil
}

// checkMask refuses an empty update mask or one naming other fields than
// allowed.
func checkMask(mask []string, allowed ...string) error {
	if len(mask) == 0 {
		return fmt.Errorf("update_mask: empty; want %v", allowed)
	}
	for _, f := range mask {
		if !slices.Contains(allowed, f) {
			return fmt.Errorf("update_mask: %q cannot change; want %v", f, allowed)
		}
	}
	return nil
}

// IsVersionNumber reports whether s is a version number as a name names
// it: decimal, no sign or leading zero.
func IsVersionNumber(s string) bool {
	if s == "" || len(s) > 18 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s[0] != '0'
}

// ModelOperation makes one change to the model repository (see
// ModelOperationName). A refusal (the model is another user's, no such
// version, a name taken) fails it, not retried, with the activity's
// error type.
func ModelOperation(ctx workflow.Context, in ModelOpInput) (ModelOpResult, error) {
	if err := in.check(); err != nil {
		return ModelOpResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidSpec, nil)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10},
		Summary:     in.Kind + " " + in.Model,
	})
	return acts.ModelOp.Run(actx, in)
}
