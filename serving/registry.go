package serving

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// Servable is one loaded model version: its bundle and its Transform,
// verified to agree. Immutable and safe for concurrent use; Linear's
// scratch buffers are not, so predictions use Predict, which allocates its
// own.
type Servable struct {
	Model     string
	Version   int64
	Bundle    *train.Bundle
	Transform *preprocess.Transform

	id            string         // versionID of the directory it was loaded from
	versionText   string         // Version in decimal
	versionHeader []string       // X-Model-Version: versionText
	columns       map[string]int // the Schema's columns' indexes, by name
	classJSON     [][]byte       // LabelVocab as JSON strings
}

// versionID identifies the content of a version directory: the SHA-256 of
// its metadata.json, which holds the hash of every other file ("" if it
// cannot be read). A directory removed and published again under the same
// number gets a new ID.
func versionID(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, train.MetadataFile))
	if err != nil {
		return ""
	}
	return digest(b)
}

// TransformFile is the name of the Transform artifact inside a bundle.
const TransformFile = "transform.json"

// Load reads and verifies the bundle of one version: file hashes, the
// Transform's own hash against the one the model was trained with, and the
// feature dimension and classes on both sides. The model is a classifier
// (NumClasses ≥ 2) or a regressor of one output (NumClasses 0).
func Load(model string, version int64, dir string) (*Servable, error) {
	b, err := train.ReadBundle(dir)
	if err != nil {
		return nil, err
	}
	raw, ok := b.Files[TransformFile]
	if !ok {
		return nil, fmt.Errorf("%w: %s has no %s", train.ErrBundle, dir, TransformFile)
	}
	t, err := preprocess.ParseTransform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", train.ErrBundle, dir, err)
	}
	switch {
	case t.Hash != b.Meta.TransformHash || t.Hash != b.Meta.Model.TransformHash:
		return nil, fmt.Errorf("%w: %s: transform %s is not the one the model was trained with (%s)", train.ErrBundle, dir, t.Hash, b.Meta.Model.TransformHash)
	case b.Model.NumClasses() == 0 && b.Model.Outputs() != 1:
		return nil, fmt.Errorf("%w: %s: regressor %s has %d outputs; this server answers regressors of one", train.ErrBundle, dir, b.Meta.Model.Model, b.Model.Outputs())
	case b.Model.NumClasses() == 1:
		return nil, fmt.Errorf("%w: %s: %s has one class", train.ErrBundle, dir, b.Meta.Model.Model)
	case t.Dim != b.Model.InputDim() || t.Classes() != b.Model.NumClasses():
		return nil, fmt.Errorf("%w: %s: transform gives %d features and %d classes, model takes %d and %d", train.ErrBundle, dir, t.Dim, t.Classes(), b.Model.InputDim(), b.Model.NumClasses())
	}
	sv := &Servable{Model: model, Version: version, Bundle: b, Transform: t, versionText: strconv.FormatInt(version, 10), columns: map[string]int{}}
	sv.versionHeader = []string{sv.versionText}
	for i, c := range t.Schema.Columns {
		sv.columns[c.Name] = i
	}
	for _, class := range t.LabelVocab {
		q, err := marshalPlain(class)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: class %q: %w", train.ErrBundle, dir, class, err)
		}
		sv.classJSON = append(sv.classJSON, q)
	}
	return sv, nil
}

// Registry holds the loaded versions of every model in a Repository and
// swaps new ones in atomically. Safe for concurrent use.
type Registry struct {
	repo *Repository
	log  *slog.Logger

	reloadMu sync.Mutex // serialises Reload; guards refused
	mu       sync.RWMutex
	models   map[string]*modelVersions
	// refused remembers versions that failed to load, by model/version and
	// the identity of their content (see versionID), so a broken bundle is
	// logged once, not on every reload, and a replacement is tried.
	refused map[string]string
}

type modelVersions struct {
	versions map[int64]*Servable
	def      int64
	labels   map[string]int64
}

// NewRegistry returns an empty registry over repo; call Reload to load.
func NewRegistry(repo *Repository, log *slog.Logger) *Registry {
	return &Registry{repo: repo, log: log.With("component", "registry"), models: map[string]*modelVersions{}, refused: map[string]string{}}
}

// Reload loads every new version in the repository, drops versions that
// disappeared, and updates defaults. A version that fails to load is
// refused with a log line; the versions already loaded keep serving.
func (r *Registry) Reload() error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	names, err := r.repo.Models()
	if err != nil {
		return err
	}
	next := map[string]*modelVersions{}
	for _, name := range names {
		vs, err := r.repo.Versions(name)
		if err != nil {
			return err
		}
		r.mu.RLock()
		old := r.models[name]
		r.mu.RUnlock()
		cfg, err := r.repo.Config(name)
		if err != nil {
			r.log.Error("bad model config; serving the defaults", "model", name, "error", err)
			cfg = ModelConfig{Latest: DefaultLatest}
		}
		def, _ := r.repo.Default(name)
		serve := cfg.Serve(vs, def)
		mv := &modelVersions{versions: map[int64]*Servable{}, labels: cfg.Labels}
		for _, v := range vs {
			if !serve[v] {
				continue // not loaded, or unloaded: its memory goes with the old map
			}
			dir := r.repo.Dir(name, v)
			id := versionID(dir)
			if old != nil && old.versions[v] != nil && old.versions[v].id == id {
				mv.versions[v] = old.versions[v]
				continue
			}
			key := fmt.Sprintf("%s/%d", name, v)
			if prev, ok := r.refused[key]; ok && prev == id {
				continue
			}
			delete(r.refused, key)
			s, err := Load(name, v, dir)
			if err != nil {
				r.refused[key] = id
				r.log.Error("refuse model version", "model", name, "version", v, "error", err)
				continue
			}
			r.log.Info("load model version", "model", name, "version", v, "global_step", s.Bundle.Meta.Step)
			s.id = id
			mv.versions[v] = s
		}
		if len(mv.versions) == 0 {
			continue
		}
		mv.def = def
		if mv.versions[mv.def] == nil {
			loaded := make([]int64, 0, len(mv.versions))
			for v := range mv.versions {
				loaded = append(loaded, v)
			}
			mv.def = slices.Max(loaded)
		}
		next[name] = mv
	}
	r.mu.Lock()
	r.models = next
	r.mu.Unlock()
	return nil
}

// Watch reloads every interval until ctx is done.
func (r *Registry) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Reload(); err != nil {
				r.log.Error("reload models", "error", err)
			}
		}
	}
}

// Get returns a loaded version; version 0 means the default.
func (r *Registry) Get(model string, version int64) (*Servable, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	mv := r.models[model]
	if mv == nil {
		return nil, fmt.Errorf("%w: model %q is not loaded", ErrNotFound, model)
	}
	if version == 0 {
		version = mv.def
	}
	s := mv.versions[version]
	if s == nil {
		return nil, fmt.Errorf("%w: model %q has no loaded version %d", ErrNotFound, model, version)
	}
	return s, nil
}

// GetLabel returns the version a label of model names.
func (r *Registry) GetLabel(model, label string) (*Servable, error) {
	r.mu.RLock()
	mv := r.models[model]
	var v int64
	if mv != nil {
		v = mv.labels[label]
	}
	r.mu.RUnlock()
	if mv == nil {
		return nil, fmt.Errorf("%w: model %q is not loaded", ErrNotFound, model)
	}
	if v == 0 {
		return nil, fmt.Errorf("%w: model %q has no label %q", ErrNotFound, model, label)
	}
	return r.Get(model, v)
}

// Models lists the names of the loaded models, sorted.
func (r *Registry) Models() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.models))
	for n := range r.models {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Status lists the loaded versions of a model and its default.
func (r *Registry) Status(model string) (versions []int64, def int64, err error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	mv := r.models[model]
	if mv == nil {
		return nil, 0, fmt.Errorf("%w: model %q is not loaded", ErrNotFound, model)
	}
	for v := range mv.versions {
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions, mv.def, nil
}
