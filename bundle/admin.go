package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// ModelInfoFile is <model>/model.json: what Cloud ML Engine's models.create
// (the ml/v1 API) says of a model it creates before any version is
// published (ModelInfo). A model published by a job has none.
const ModelInfoFile = "model.json"

// ModelInfo is a created model's model.json.
type ModelInfo struct {
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	CreateTime  time.Time         `json:"create_time"`
	// CreatedBy is the Temporal principal that asked for the model (its
	// operation's start event, as the server stamped it): the model's
	// user, who alone deletes it or its versions and sets its default.
	CreatedBy string `json:"created_by,omitempty"`
	// Operation is the workflow that created it: a retry of that
	// operation finds its own model, not a conflict.
	Operation string `json:"operation,omitempty"`
	// Versions are the versions' descriptions (versions.patch), by
	// version number.
	Versions map[string]VersionInfo `json:"versions,omitempty"`
}

// VersionInfo is what versions.patch recorded of a version.
type VersionInfo struct {
	Description string `json:"description,omitempty"`
}

// Errors of the Admin methods, besides ErrNotFound.
var (
	// ErrExists: a model, or a version label, exists already.
	ErrExists = errors.New("bundle: already exists")
	// ErrInUse: a default version, or a model with versions, is not
	// deleted.
	ErrInUse = errors.New("bundle: in use")
)

// Admin is what the ml/v1 API's models and versions methods change in a
// repository besides publishing (Store is one). A version's Cloud ML
// Engine name is a TF Serving version label of config.json (Config.Labels):
// a labelled version is always served, under /versions/N and
// /labels/NAME.
type Admin interface {
	// CreateModel records info as model's model.json; a model with any
	// object already is ErrExists.
	CreateModel(ctx context.Context, model string, info ModelInfo) error
	// ModelInfo reads model.json (false: the model has none).
	ModelInfo(ctx context.Context, model string) (ModelInfo, bool, error)
	// SetVersionLabel names version label in config.json; a label of
	// another version is ErrExists, a version not there ErrNotFound.
	SetVersionLabel(ctx context.Context, model, label string, version int64) error
	// DeleteVersion removes version and the labels naming it; the
	// default version is ErrInUse.
	DeleteVersion(ctx context.Context, model string, version int64) error
	// DeleteModel removes a model without versions (ErrInUse if it has
	// some) and everything it holds.
	DeleteModel(ctx context.Context, model string) error
	// UpdateModelInfo changes model's model.json with change (made if
	// the model has none: a published model patched).
	UpdateModelInfo(ctx context.Context, model string, change func(*ModelInfo)) error
}

var _ Admin = (*Store)(nil)

// CreateModel records info for a new model (see Admin). A local
// repository creates model.json exclusively: of two creates, one wins.
func (r *Store) CreateModel(ctx context.Context, model string, info ModelInfo) error {
	if !ValidName(model) {
		return fmt.Errorf("create model: invalid model name %q", model)
	}
	ms, err := r.Models(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(ms, model) {
		return fmt.Errorf("%w: model %s", ErrExists, model)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if root, ok := r.st.LocalDir(); ok {
		err = createExclusive(filepath.Join(root, model), ModelInfoFile, b, 0)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: model %s", ErrExists, model)
		}
		return err
	}
	return r.st.Write(ctx, model+"/"+ModelInfoFile, b)
}

// ModelInfo reads model's model.json (see Admin).
func (r *Store) ModelInfo(ctx context.Context, model string) (ModelInfo, bool, error) {
	var info ModelInfo
	if !ValidName(model) {
		return info, false, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	b, err := r.read(ctx, model+"/"+ModelInfoFile)
	if errors.Is(err, fs.ErrNotExist) {
		return info, false, nil
	}
	if err != nil {
		return info, false, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, false, fmt.Errorf("%s of %s: %w", ModelInfoFile, model, err)
	}
	return info, true, nil
}

// SetVersionLabel names version label (see Admin). Labels and the rest
// of config.json are read, changed and written back: changes of one
// model's config must not run at once.
func (r *Store) SetVersionLabel(ctx context.Context, model, label string, version int64) error {
	if !ValidName(label) {
		return fmt.Errorf("version label %q: letters, digits and '_', starting with a letter", label)
	}
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return err
	}
	if !slices.Contains(vs, version) {
		return fmt.Errorf("%w: model %s version %d", ErrNotFound, model, version)
	}
	c, err := r.Config(ctx, model)
	if err != nil {
		return err
	}
	if v, ok := c.Labels[label]; ok {
		if v == version {
			return nil
		}
		return fmt.Errorf("%w: model %s has a version named %s (version %d)", ErrExists, model, label, v)
	}
	if c.Labels == nil {
		c.Labels = map[string]int64{}
	}
	c.Labels[label] = version
	return r.writeConfig(ctx, model, c)
}

// writeConfig writes a model's config.json.
func (r *Store) writeConfig(ctx context.Context, model string, c Config) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := r.st.Write(ctx, model+"/"+ConfigFile, b); err != nil {
		return fmt.Errorf("config of %s: %w", model, err)
	}
	return nil
}

// DeleteVersion removes a version that is not the default (see Admin):
// its labels first, so that no label names a missing version.
func (r *Store) DeleteVersion(ctx context.Context, model string, version int64) error {
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return err
	}
	if !slices.Contains(vs, version) {
		return fmt.Errorf("%w: model %s version %d", ErrNotFound, model, version)
	}
	def, err := r.Default(ctx, model)
	if err != nil {
		return err
	}
	if def == version {
		return fmt.Errorf("%w: version %d is model %s's default; set another default first", ErrInUse, version, model)
	}
	c, err := r.Config(ctx, model)
	if err != nil {
		return err
	}
	n := len(c.Labels) + len(c.Versions)
	maps.DeleteFunc(c.Labels, func(_ string, v int64) bool { return v == version })
	c.Versions = slices.DeleteFunc(c.Versions, func(v int64) bool { return v == version })
	if len(c.Labels)+len(c.Versions) < n { // config.json named it
		if err := r.writeConfig(ctx, model, c); err != nil {
			return err
		}
	}
	return r.remove(ctx, versionKey(model, version))
}

// DeleteModel removes a model without versions (see Admin).
func (r *Store) DeleteModel(ctx context.Context, model string) error {
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return err
	}
	if len(vs) > 0 {
		return fmt.Errorf("%w: model %s has %d versions; delete them first", ErrInUse, model, len(vs))
	}
	ms, err := r.Models(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(ms, model) {
		return fmt.Errorf("%w: model %s", ErrNotFound, model)
	}
	return r.remove(ctx, model)
}

// UpdateModelInfo changes a model's model.json (see Admin): read,
// changed and written back, as config.json is.
func (r *Store) UpdateModelInfo(ctx context.Context, model string, change func(*ModelInfo)) error {
	ms, err := r.Models(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(ms, model) {
		return fmt.Errorf("%w: model %s", ErrNotFound, model)
	}
	info, _, err := r.ModelInfo(ctx, model)
	if err != nil {
		return err
	}
	change(&info)
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return r.st.Write(ctx, model+"/"+ModelInfoFile, b)
}

// VersionByName resolves a version's name among versions vs: a label of
// labels (config.json's, the name ml/v1's versions.create gives), else
// its number. ok is false when neither names one of vs.
func VersionByName(name string, vs []int64, labels map[string]int64) (v int64, ok bool) {
	if v, ok := labels[name]; ok && slices.Contains(vs, v) {
		return v, true
	}
	n, err := strconv.ParseInt(name, 10, 64)
	return n, err == nil && n > 0 && slices.Contains(vs, n)
}

// VersionName is version v's name: its first label in sorted order (a
// version may have several), else its number.
func VersionName(v int64, labels map[string]int64) string {
	for _, l := range slices.Sorted(maps.Keys(labels)) {
		if labels[l] == v {
			return l
		}
	}
	return strconv.FormatInt(v, 10)
}
