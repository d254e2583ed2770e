package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/train"
)

// Repository is a model repository (see the package documentation for its
// layout and publish protocol). Implementations are safe for concurrent
// use, but publishes of one model must not run concurrently unless the
// repository is a local directory.
type Repository interface {
	// Models lists the models that have objects in the repository, sorted.
	Models(ctx context.Context) ([]string, error)
	// Versions lists the complete versions of model, lowest first.
	Versions(ctx context.Context, model string) ([]int64, error)
	// Default returns the default version of model: the one its default
	// file names, else the highest.
	Default(ctx context.Context, model string) (int64, error)
	// Config reads a model's config.json; a missing one gives the
	// defaults.
	Config(ctx context.Context, model string) (Config, error)
	// VersionID identifies the content of a version: the SHA-256 of its
	// metadata.json ("" if there is none). A version removed and published
	// again under the same number gets a new ID.
	VersionID(ctx context.Context, model string, version int64) (string, error)
	// Read reads and verifies the bundle of a version, its model built by
	// models (nil: the built-in types only; see the function Read).
	Read(ctx context.Context, model string, version int64, models *train.Registry) (*Bundle, error)
	// Publish adds b as the next version of model and returns that
	// version and whether it is the default: the first version of a model
	// is, a later one only with promote. It is idempotent: a bundle
	// already published (same metadata.json) returns its existing version,
	// promoted if asked. jobID is recorded in the version's source.json.
	Publish(ctx context.Context, model, jobID string, b *Bundle, promote bool) (version int64, isDefault bool, err error)
	// PublishAs is Publish for the job by under the operator's rule for
	// the model: the first publish of a model records by as its owner
	// (OwnerFile); a later one, or a promote, by another job than the
	// owner is refused (ErrNotOwner) unless rule allows that job.
	// Publish is PublishAs with an open rule, for the operator's tools.
	PublishAs(ctx context.Context, model string, by Publisher, b *Bundle, promote bool, rule Rule) (version int64, isDefault bool, err error)
	// Owner returns the owner of model, and false if it has none.
	Owner(ctx context.Context, model string) (Publisher, bool, error)
	// Dir returns the local directory of a version, and false if the
	// repository is not on local disk.
	Dir(model string, version int64) (string, bool)
	// Location is the repository's path or URI, for messages.
	Location() string
	// Routing reads a model's routing (routing.json); a model without
	// one has the zero rollout.Routing.
	Routing(ctx context.Context, model string) (rollout.Routing, error)
	// SetRouting checks rt against the model's versions, makes it the
	// model's routing and records the change in its history.
	SetRouting(ctx context.Context, model string, rt rollout.Routing, cause Cause, now time.Time) (Change, error)
	// Promote makes version the default, clears the routing and records
	// the change.
	Promote(ctx context.Context, model string, version int64, cause Cause, now time.Time) (Change, error)
	// History lists the model's routing and default changes, oldest
	// first.
	History(ctx context.Context, model string) ([]Change, error)
	// Telemetry reads every server's telemetry record of the model.
	Telemetry(ctx context.Context, model string) ([]rollout.Telemetry, error)
	// CheckPromote reports whether a version may take traffic under the
	// operator's rule (ErrNotOwner if not).
	CheckPromote(ctx context.Context, model string, version int64, rule Rule) error
}

// ErrNotFound is wrapped by errors about a model or version that does not
// exist.
var ErrNotFound = errors.New("bundle: not found")

// ValidName reports whether name can be a model name or a version label:
// letters, digits and '_', starting with a letter, at most 128
// characters. Nothing else reaches a key or a path.
func ValidName(name string) bool { return ident.Valid(name) }

// Config is the optional <model>/config.json: which versions to serve, as
// TF Serving's model_version_policy and version_labels.
type Config struct {
	// Latest serves the newest Latest versions; default DefaultLatest.
	Latest int `json:"latest,omitempty"`
	// Versions, if set, serves exactly these versions instead.
	Versions []int64 `json:"versions,omitempty"`
	// Labels name versions ("stable", "canary"); labelled versions are
	// always served, as is the default version.
	Labels map[string]int64 `json:"labels,omitempty"`
}

// DefaultLatest is how many of the newest versions are served when a model
// has no config.
const DefaultLatest = 3

// Serve returns which of the versions vs (ascending) the config serves,
// given the default version def.
func (c Config) Serve(vs []int64, def int64) map[int64]bool {
	out := map[int64]bool{}
	if len(c.Versions) > 0 {
		for _, v := range c.Versions {
			out[v] = true
		}
	} else {
		for _, v := range vs[max(0, len(vs)-c.Latest):] {
			out[v] = true
		}
	}
	out[def] = true
	for _, v := range c.Labels {
		out[v] = true
	}
	return out
}

// parseConfig decodes and checks a config.json.
func parseConfig(model string, b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("config of %s: %w", model, err)
	}
	if c.Latest < 0 {
		return c, fmt.Errorf("config of %s: latest %d is negative", model, c.Latest)
	}
	if c.Latest == 0 && len(c.Versions) == 0 {
		c.Latest = DefaultLatest
	}
	for l := range c.Labels {
		if !ValidName(l) {
			return c, fmt.Errorf("config of %s: label %q: letters, digits and '_', starting with a letter", model, l)
		}
	}
	return c, nil
}

// Store is the Repository in a storage.Store: a local directory (a
// file:// store) or object storage. One implementation serves both; only
// the step that makes a new version appear differs (see put).
type Store struct {
	st *storage.Store
}

var _ Repository = (*Store)(nil)

// NewStore returns the repository in st, which the caller closes.
func NewStore(st *storage.Store) *Store { return &Store{st: st} }

// OpenRepository opens the repository at loc, a local directory (created
// if missing) or a storage URI such as s3://bucket/models?region=….
// Close it when done.
func OpenRepository(ctx context.Context, loc string) (*Store, error) {
	st, err := storage.Open(ctx, loc)
	if err != nil {
		return nil, err
	}
	return &Store{st: st}, nil
}

// Close releases the repository's storage connection.
func (r *Store) Close() error { return r.st.Close() }

// Location returns the repository's URI (file:// for a local directory).
func (r *Store) Location() string { return r.st.URI() }

// LocalDir returns the repository's directory if it is on local disk.
func (r *Store) LocalDir() (string, bool) { return r.st.LocalDir() }

// Dir returns the local directory of a version.
func (r *Store) Dir(model string, version int64) (string, bool) {
	root, ok := r.st.LocalDir()
	if !ok {
		return "", false
	}
	return filepath.Join(root, model, strconv.FormatInt(version, 10)), true
}

// versionKey is the key prefix of a version, without the trailing "/".
func versionKey(model string, version int64) string {
	return model + "/" + strconv.FormatInt(version, 10)
}

// scan lists the keys under prefix ("" or "<model>/") and returns the
// complete versions (those with a metadata.json) of each model found,
// ascending. Keys that are no model's (invalid names) and versions of a
// non-canonical number ("01", "+1") are ignored; a model with no complete
// version maps to none.
func (r *Store) scan(ctx context.Context, prefix string) (map[string][]int64, error) {
	keys, err := r.list(ctx, prefix)
	if err != nil {
		return nil, err
	}
	models := map[string][]int64{}
	for _, k := range keys {
		parts := strings.SplitN(k, "/", 3)
		if len(parts) < 2 || !ValidName(parts[0]) {
			continue // not under a model's prefix
		}
		vs := models[parts[0]]
		if len(parts) < 3 || parts[2] != MetadataFile {
			models[parts[0]] = vs // default, config.json, other files
			continue
		}
		v, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || v <= 0 || strconv.FormatInt(v, 10) != parts[1] {
			continue
		}
		models[parts[0]] = append(vs, v)
	}
	for _, vs := range models {
		slices.Sort(vs)
	}
	return models, nil
}

// list returns the keys under prefix ("" or "<model>/") that scan needs.
// In object storage that is every key. In a local directory, where a
// version appears by the rename of its complete directory, the directory
// is the version's marker: list reads the root and each model directory
// and gives "<model>/<version>/metadata.json" for every version directory
// (without looking inside, as the old local repository did) and
// "<model>/<name>" for the other entries. Listing every file of every
// bundle through the file driver instead made a reload of a 10-version
// repository 15 times slower.
func (r *Store) list(ctx context.Context, prefix string) ([]string, error) {
	root, ok := r.st.LocalDir()
	if !ok {
		return r.st.List(ctx, prefix)
	}
	var models []string
	if prefix != "" {
		models = []string{strings.TrimSuffix(prefix, "/")}
	} else {
		ents, err := os.ReadDir(root)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", root, err)
		}
		for _, e := range ents {
			if e.IsDir() {
				models = append(models, e.Name())
			}
		}
	}
	var keys []string
	for _, m := range models {
		if !ValidName(m) {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(root, m))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", m, err)
		}
		for _, e := range ents {
			k := m + "/" + e.Name()
			if e.IsDir() {
				k += "/" + MetadataFile
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// read returns the object at key; a missing one matches fs.ErrNotExist.
// A local directory's files are read directly, without the file driver's
// attribute lookups: the registry reads a few on every reload.
func (r *Store) read(ctx context.Context, key string) ([]byte, error) {
	if root, ok := r.st.LocalDir(); ok {
		return os.ReadFile(filepath.Join(root, filepath.FromSlash(key)))
	}
	return r.st.Read(ctx, key)
}

// Models lists the models that have objects in the repository, sorted.
func (r *Store) Models(ctx context.Context) ([]string, error) {
	keys, err := r.list(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var out []string
	for _, k := range keys {
		m, _, ok := strings.Cut(k, "/")
		if ok && ValidName(m) && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Versions lists the complete versions of model, lowest first.
func (r *Store) Versions(ctx context.Context, model string) ([]int64, error) {
	if !ValidName(model) {
		return nil, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	ms, err := r.scan(ctx, model+"/")
	if err != nil {
		return nil, fmt.Errorf("list versions of %s: %w", model, err)
	}
	return ms[model], nil
}

// Default returns the default version of model: the one its default file
// names, else the highest complete one.
func (r *Store) Default(ctx context.Context, model string) (int64, error) {
	if !ValidName(model) {
		return 0, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	b, err := r.read(ctx, model+"/"+DefaultFile)
	if err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return v, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		return 0, fmt.Errorf("%w: model %q has no versions", ErrNotFound, model)
	}
	return vs[len(vs)-1], nil
}

// Config reads a model's config.json; a missing file gives the defaults.
func (r *Store) Config(ctx context.Context, model string) (Config, error) {
	if !ValidName(model) {
		return Config{}, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	b, err := r.read(ctx, model+"/"+ConfigFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Config{Latest: DefaultLatest}, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("config of %s: %w", model, err)
	}
	return parseConfig(model, b)
}

// VersionID returns the SHA-256 of a version's metadata.json, "" if it
// has none.
func (r *Store) VersionID(ctx context.Context, model string, version int64) (string, error) {
	if !ValidName(model) {
		return "", fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	b, err := r.read(ctx, versionKey(model, version)+"/"+MetadataFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return Digest(b), nil
}

// Read reads and verifies the bundle of a version, its model built by
// models.
func (r *Store) Read(ctx context.Context, model string, version int64, models *train.Registry) (*Bundle, error) {
	if !ValidName(model) {
		return nil, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	if dir, ok := r.Dir(model, version); ok {
		return ReadDir(dir, models)
	}
	sub := r.st.Sub(versionKey(model, version))
	return ReadStore(ctx, sub, sub.URI(), models)
}

// source is source.json, written into every published version so that
// publishing the same bundle again finds it instead of adding a version.
type source struct {
	JobID  string `json:"job_id"`
	Bundle string `json:"bundle"`
	Hash   string `json:"hash"`
}

// Publish adds b as the next version of model (see Repository.Publish).
// Locally the version's directory appears by one rename; in object
// storage its files and source.json go first, metadata.json last, then
// the default object, and a publish that fails midway leaves an
// incomplete version that readers ignore and the next publish overwrites.
func (r *Store) Publish(ctx context.Context, model, jobID string, b *Bundle, promote bool) (version int64, isDefault bool, err error) {
	return r.PublishAs(ctx, model, Publisher{JobID: jobID}, b, promote, Rule{Open: true})
}

// PublishAs is Publish for the job by under rule (see
// Repository.PublishAs). The owner is checked before anything is
// written, re-publishes of a bundle already there included.
func (r *Store) PublishAs(ctx context.Context, model string, by Publisher, b *Bundle, promote bool, rule Rule) (version int64, isDefault bool, err error) {
	if !ValidName(model) {
		return 0, false, fmt.Errorf("publish: invalid model name %q", model)
	}
	src := source{JobID: by.JobID, Bundle: b.Dir, Hash: b.ID()}
	vs, err := r.Versions(ctx, model)
	if err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	// A model's first version becomes its default: publishing it is a
	// promote (an owner record left by a publish that failed midway must
	// not let another job's version become the default).
	if err := r.checkOwner(ctx, model, vs, by, rule, promote || len(vs) == 0); err != nil {
		return 0, false, err
	}
	for _, v := range vs {
		var s source
		raw, err := r.read(ctx, versionKey(model, v)+"/"+SourceFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, false, fmt.Errorf("publish: %w", err)
		}
		if err == nil && json.Unmarshal(raw, &s) == nil && s.Hash == src.Hash {
			if promote {
				if err := r.setDefault(ctx, model, v); err != nil {
					return 0, false, err
				}
			}
			d, err := r.Default(ctx, model)
			return v, err == nil && d == v, err
		}
	}
	version = 1
	if len(vs) > 0 {
		version = vs[len(vs)-1] + 1
	}
	files := maps.Clone(b.Files)
	files[MetadataFile] = b.metadata
	files[SourceFile], _ = json.Marshal(src)
	if err := put(ctx, r.st, versionKey(model, version), files); err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	if version == 1 || promote {
		if err := r.setDefault(ctx, model, version); err != nil {
			return 0, false, err
		}
		isDefault = true
	}
	return version, isDefault, nil
}

// setDefault points the model's default file at version.
func (r *Store) setDefault(ctx context.Context, model string, version int64) error {
	if err := r.st.Write(ctx, model+"/"+DefaultFile, []byte(strconv.FormatInt(version, 10)+"\n")); err != nil {
		return fmt.Errorf("set default version of %s: %w", model, err)
	}
	return nil
}

// Sync makes dst a mirror of the complete versions in src, and of each
// model's default and config.json: it copies the versions dst lacks (each
// appearing whole, see put), removes versions and models src no longer
// has, and rewrites default, config.json and routing.json when they differ. It reports
// whether it changed dst. A version already in dst is not compared with
// src: a version number deleted and published again is not fetched again.
// dst must be this mirror's own, written by one Sync at a time.
func Sync(ctx context.Context, src, dst *Store) (changed bool, err error) {
	ms, err := src.scan(ctx, "")
	if err != nil {
		return false, fmt.Errorf("sync models: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(ms)) {
		c, err := syncModel(ctx, src, dst, name, ms[name])
		changed = changed || c
		if err != nil {
			return changed, err
		}
	}
	local, err := dst.Models(ctx)
	if err != nil {
		return changed, err
	}
	for _, name := range local {
		if _, ok := ms[name]; !ok {
			if err := dst.remove(ctx, name); err != nil {
				return changed, fmt.Errorf("sync %s: %w", name, err)
			}
			changed = true
		}
	}
	return changed, nil
}

// syncModel mirrors one model's complete versions vs, then its default and
// config.json.
func syncModel(ctx context.Context, src, dst *Store, name string, vs []int64) (changed bool, err error) {
	have, err := dst.Versions(ctx, name)
	if err != nil {
		return false, err
	}
	for _, v := range vs {
		if slices.Contains(have, v) {
			continue
		}
		if err := copyVersion(ctx, src, dst, name, v); err != nil {
			return changed, fmt.Errorf("sync %s/%d: %w", name, v, err)
		}
		changed = true
	}
	for _, v := range have {
		if !slices.Contains(vs, v) {
			if err := dst.remove(ctx, versionKey(name, v)); err != nil {
				return changed, fmt.Errorf("sync %s/%d: %w", name, v, err)
			}
			changed = true
		}
	}
	for _, f := range []string{DefaultFile, ConfigFile, RoutingFile} {
		c, err := syncFile(ctx, src, dst, name+"/"+f)
		changed = changed || c
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// copyVersion copies every object of a version from src to dst.
func copyVersion(ctx context.Context, src, dst *Store, name string, v int64) error {
	prefix := versionKey(name, v) + "/"
	keys, err := src.st.List(ctx, prefix)
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	for _, k := range keys {
		if files[strings.TrimPrefix(k, prefix)], err = src.st.Read(ctx, k); err != nil {
			return err
		}
	}
	if _, ok := files[MetadataFile]; !ok {
		return nil // deleted since the scan
	}
	if err := put(ctx, dst.st, versionKey(name, v), files); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// syncFile makes the object at key in dst the one in src, or removes it if
// src has none.
func syncFile(ctx context.Context, src, dst *Store, key string) (changed bool, err error) {
	want, err := src.st.Read(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		ok, err := dst.st.Exists(ctx, key)
		if err != nil || !ok {
			return false, err
		}
		if err := dst.st.Delete(ctx, key); err != nil {
			return false, fmt.Errorf("sync %s: %w", key, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("sync %s: %w", key, err)
	}
	if got, err := dst.st.Read(ctx, key); err == nil && string(got) == string(want) {
		return false, nil
	}
	if err := dst.st.Write(ctx, key, want); err != nil {
		return false, fmt.Errorf("sync %s: %w", key, err)
	}
	return true, nil
}

// remove deletes every object under prefix (a model or a version), and
// its directory when the repository is local.
func (r *Store) remove(ctx context.Context, prefix string) error {
	if err := r.st.DeleteAll(ctx, prefix+"/"); err != nil {
		return err
	}
	if root, ok := r.st.LocalDir(); ok {
		return os.RemoveAll(filepath.Join(root, filepath.FromSlash(prefix)))
	}
	return nil
}
