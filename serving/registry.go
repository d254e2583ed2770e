package serving

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/train"
)

// ErrNotFound is wrapped by errors about a model or version that is not
// loaded.
var ErrNotFound = errors.New("serving: not found")

// Servable is one loaded model version: its bundle and its Transform,
// verified to agree. Immutable and safe for concurrent use; Linear's
// scratch buffers are not, so predictions use Predict, which allocates its
// own.
type Servable struct {
	Model     string
	Version   int64
	Bundle    *bundle.Bundle
	Transform *preprocess.Transform

	versionText   string         // Version in decimal
	versionHeader []string       // X-Model-Version: versionText
	columns       map[string]int // the Schema's columns' indexes, by name
	classJSON     [][]byte       // LabelVocab as JSON strings
	inputs        []tensor       // the raw inputs of the signature
	outputs       []tensor       // what the model answers per row
	// single is the name of the model's one input, "" if it has
	// several: a request may then omit it (TF Serving's bare instances
	// and columnar lists).
	single string
	// tel counts what this version answers; the registry gives it when
	// it loads the version (nil for a Servable made outside a registry).
	tel *versionTel
}

// Load reads and verifies the bundle in the local directory dir as
// version of model, its model built by models (nil: the built-in types
// only); see NewServable.
func Load(model string, version int64, dir string, models *train.Registry) (*Servable, error) {
	b, err := bundle.ReadDir(dir, models)
	if err != nil {
		return nil, err
	}
	return NewServable(model, version, b)
}

// NewServable checks that this server can answer for the bundle b and
// prepares it as version of model: its Transform must be the one the
// model was trained with and agree with it on the feature dimension and
// classes (see Bundle.Transform), and the model is a classifier
// (NumClasses ≥ 2) or a regressor of one output (NumClasses 0).
func NewServable(model string, version int64, b *bundle.Bundle) (*Servable, error) {
	t, err := b.Transform()
	if err != nil {
		return nil, err
	}
	switch {
	case b.Model.NumClasses() == 0 && b.Model.Outputs() != 1:
		return nil, fmt.Errorf("%w: %s: regressor %s has %d outputs; this server answers regressors of one", bundle.ErrBundle, b.Dir, b.Meta.Model.Model, b.Model.Outputs())
	case b.Model.NumClasses() == 1:
		return nil, fmt.Errorf("%w: %s: %s has one class", bundle.ErrBundle, b.Dir, b.Meta.Model.Model)
	}
	sv := &Servable{Model: model, Version: version, Bundle: b, Transform: t, versionText: strconv.FormatInt(version, 10), columns: map[string]int{}}
	sv.versionHeader = []string{sv.versionText}
	sv.inputs, sv.outputs = inputTensors(t), outputTensors(b.Model.NumClasses(), b.Model.Outputs())
	if len(sv.inputs) == 1 {
		sv.single = sv.inputs[0].name
	}
	for i, c := range t.Schema.Columns {
		sv.columns[c.Name] = i
	}
	for _, class := range t.LabelVocab {
		q, err := marshalPlain(class)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: class %q: %w", bundle.ErrBundle, b.Dir, class, err)
		}
		sv.classJSON = append(sv.classJSON, q)
	}
	return sv, nil
}

// Registry holds the loaded versions of every model in a Repository and
// swaps new ones in atomically. Safe for concurrent use.
type Registry struct {
	repo  bundle.Repository
	types *train.Registry // builds the bundles' models
	log   *slog.Logger

	reloadMu sync.Mutex // serialises Reload; guards refused
	mu       sync.RWMutex
	models   map[string]*modelVersions
	// refused remembers versions that failed to load, by model/version and
	// the state they failed in (see state), so a broken bundle is logged
	// once, not on every reload, and a replacement, or a version that was
	// still being copied into place file by file, is tried again once it
	// changes.
	refused map[string]string
	// tel holds the counters of every version loaded since the registry
	// was made, by model/version/bundle ID: a version unloaded and loaded
	// again counts on, so telemetry never goes back.
	telMu sync.Mutex
	tel   map[string]*versionTel
	boot  time.Time
}

type modelVersions struct {
	versions map[int64]*Servable
	def      int64
	labels   map[string]int64
	// routing splits the requests that name no version; its versions
	// are all loaded (else it is the zero Routing).
	routing rollout.Routing
}

// NewRegistry returns an empty registry over repo whose bundles' models
// models builds (nil: the built-in types only); call Reload to load. A
// version of a type models does not know is refused like any bundle that
// does not load: logged with its type named, the other versions and
// models serving on.
func NewRegistry(repo bundle.Repository, models *train.Registry, log *slog.Logger) *Registry {
	return &Registry{repo: repo, types: models, log: log.With("component", "registry"), models: map[string]*modelVersions{}, refused: map[string]string{}, tel: map[string]*versionTel{}, boot: time.Now()}
}

// Reload loads every new version in the repository, drops versions that
// disappeared, and updates defaults. A version that fails to load is
// refused with a log line; the versions already loaded keep serving.
func (r *Registry) Reload() error { return r.reload(context.Background()) }

func (r *Registry) reload(ctx context.Context) error {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	names, err := r.repo.Models(ctx)
	if err != nil {
		return err
	}
	next := map[string]*modelVersions{}
	for _, name := range names {
		vs, err := r.repo.Versions(ctx, name)
		if err != nil {
			return err
		}
		r.mu.RLock()
		old := r.models[name]
		r.mu.RUnlock()
		cfg, err := r.repo.Config(ctx, name)
		if err != nil {
			r.log.Error("bad model config; serving the defaults", "model", name, "error", err)
			cfg = bundle.Config{Latest: bundle.DefaultLatest}
		}
		def, _ := r.repo.Default(ctx, name)
		serve := cfg.Serve(vs, def)
		rt, err := r.repo.Routing(ctx, name)
		if err != nil {
			r.log.Error("bad model routing; serving the default", "model", name, "error", err)
			rt = rollout.Routing{}
		}
		for _, v := range rt.Versions() {
			serve[v] = true
		}
		mv := &modelVersions{versions: map[int64]*Servable{}, labels: cfg.Labels}
		for _, v := range vs {
			if !serve[v] {
				continue // not loaded, or unloaded: its memory goes with the old map
			}
			id, _ := r.repo.VersionID(ctx, name, v)
			if old != nil && old.versions[v] != nil && old.versions[v].Bundle.ID() == id {
				mv.versions[v] = old.versions[v]
				continue
			}
			key := fmt.Sprintf("%s/%d", name, v)
			// Taken before reading: a copy that goes on while it is read
			// changes it again.
			st := r.state(name, v, id)
			if prev, ok := r.refused[key]; ok && prev == st {
				continue
			}
			delete(r.refused, key)
			b, err := r.repo.Read(ctx, name, v, r.types)
			var s *Servable
			if err == nil {
				s, err = NewServable(name, v, b)
			}
			if err != nil {
				r.refused[key] = st
				r.log.Error("refuse model version", "model", name, "version", v, "error", err)
				continue
			}
			r.log.Info("load model version", "model", name, "version", v, "global_step", s.Bundle.Meta.Step)
			s.tel = r.telFor(s)
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
		mv.routing = loadedRouting(r.log, name, rt, mv.versions)
		next[name] = mv
	}
	r.mu.Lock()
	r.models = next
	r.mu.Unlock()
	return nil
}

// maxStateFiles bounds the files state looks at in one version directory
// (a bundle has a handful).
const maxStateFiles = 1000

// state identifies what a version holds, to tell whether a refused one
// changed: its VersionID and, in a local repository, the name, size and
// modification time of every file in its directory. A directory copied
// into place file by file (cp -r rather than a rename) is refused while
// partial and tried again on the next reload after it changed.
func (r *Registry) state(model string, v int64, id string) string {
	dir, ok := r.repo.Dir(model, v)
	if !ok {
		return id
	}
	h := sha256.New()
	io.WriteString(h, id)
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if n++; n > maxStateFiles {
			return fs.SkipAll
		}
		if err != nil {
			fmt.Fprintf(h, "\x00%s\x00error", p)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		fmt.Fprintf(h, "\x00%s\x00%d\x00%d\x00%v", p, info.Size(), info.ModTime().UnixNano(), d.IsDir())
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}

// Watch reloads every interval until ctx is done.
func (r *Registry) Watch(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		if err := r.reload(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("reload models", "error", err)
		}
	})
}

// every calls f every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
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

// Labels returns a loaded model's version labels (config.json's): the
// names the ml/v1 API gives its versions.
func (r *Registry) Labels(model string) map[string]int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if mv := r.models[model]; mv != nil {
		return maps.Clone(mv.labels)
	}
	return nil
}

// Stored lists the models of the registry's repository, loaded or not
// (a model created without versions is not loaded).
func (r *Registry) Stored() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names, err := r.repo.Models(ctx)
	if err != nil {
		r.log.Error("list the repository's models", "error", err)
	}
	return names
}

// Info reads what models.create recorded of a model (bundle.Admin's
// ModelInfo); false for a model it did not create, or a repository
// without it.
func (r *Registry) Info(model string) (bundle.ModelInfo, bool) {
	a, ok := r.repo.(bundle.Admin)
	if !ok {
		return bundle.ModelInfo{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, ok, err := a.ModelInfo(ctx, model)
	return info, ok && err == nil
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
