package serving

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/ident"
	"github.com/trainflow/trainflow/train"
)

// Repository is a directory of served models:
//
//	<root>/<model>/<version>/   an export bundle (version = 1, 2, …)
//	<root>/<model>/default      the default version number, written atomically
//
// A version directory appears by rename, complete. The first version of a
// model becomes its default.
type Repository struct {
	Root string
}

// ErrNotFound is wrapped by errors about a model or version that does not
// exist.
var ErrNotFound = errors.New("serving: not found")

// ValidName reports whether name can be a model name: letters, digits and
// '_', starting with a letter, at most 128 characters. Nothing else can
// reach the file system.
func ValidName(name string) bool { return ident.Valid(name) }

// Models lists the model names in the repository.
func (r *Repository) Models() ([]string, error) {
	ents, err := os.ReadDir(r.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && ValidName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Versions lists the complete versions of model, lowest first.
func (r *Repository) Versions(model string) ([]int64, error) {
	if !ValidName(model) {
		return nil, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	ents, err := os.ReadDir(filepath.Join(r.Root, model))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list versions of %s: %w", model, err)
	}
	var vs []int64
	for _, e := range ents {
		// Only canonical names: "01" or "+1" would name a version whose
		// Dir is another directory.
		if v, err := strconv.ParseInt(e.Name(), 10, 64); err == nil && v > 0 && e.IsDir() && strconv.FormatInt(v, 10) == e.Name() {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// Default returns the default version of model: the one its default file
// names, else the highest.
func (r *Repository) Default(model string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(r.Root, model, "default"))
	if err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return v, nil
		}
	}
	vs, err := r.Versions(model)
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		return 0, fmt.Errorf("%w: model %q has no versions", ErrNotFound, model)
	}
	return vs[len(vs)-1], nil
}

// ModelConfig is the optional <root>/<model>/config.json: which versions to
// serve, as TF Serving's model_version_policy and version_labels.
type ModelConfig struct {
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

// Config reads a model's config.json; a missing file gives the defaults.
func (r *Repository) Config(model string) (ModelConfig, error) {
	var c ModelConfig
	b, err := os.ReadFile(filepath.Join(r.Root, model, "config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		c.Latest = DefaultLatest
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("config of %s: %w", model, err)
	}
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

// Serve returns which of the versions vs (ascending) the config serves,
// given the default version def.
func (c ModelConfig) Serve(vs []int64, def int64) map[int64]bool {
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

// Dir returns the directory of a version.
func (r *Repository) Dir(model string, version int64) string {
	return filepath.Join(r.Root, model, strconv.FormatInt(version, 10))
}

// source is written into every published version so that publishing the
// same bundle again finds it instead of adding a version.
type source struct {
	JobID  string `json:"job_id"`
	Bundle string `json:"bundle"`
	Hash   string `json:"hash"`
}

const sourceFile = "source.json"

// Publish is PublishVersion without promotion.
func (r *Repository) Publish(model, jobID, dir string) (version int64, isDefault bool, err error) {
	return r.PublishVersion(model, jobID, dir, false)
}

// PublishVersion copies the bundle in dir into the repository as the next
// version of model and returns that version and whether it is the default:
// the first version of a model is, a later one only with promote. It is
// idempotent: a bundle already published (same metadata hash) returns its
// existing version (and is promoted if asked).
func (r *Repository) PublishVersion(model, jobID, dir string, promote bool) (version int64, isDefault bool, err error) {
	b, meta, src, err := publishSource(model, jobID, dir)
	if err != nil {
		return 0, false, err
	}
	vs, err := r.Versions(model)
	if err != nil {
		return 0, false, err
	}
	for _, v := range vs {
		var s source
		if raw, err := os.ReadFile(filepath.Join(r.Dir(model, v), sourceFile)); err == nil && json.Unmarshal(raw, &s) == nil && s.Hash == src.Hash {
			if promote {
				if err := r.setDefault(model, v); err != nil {
					return 0, false, err
				}
			}
			d, err := r.Default(model)
			return v, err == nil && d == v, err
		}
	}
	version = 1
	if len(vs) > 0 {
		version = vs[len(vs)-1] + 1
	}
	parent := filepath.Join(r.Root, model)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-publish-")
	if err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	defer os.RemoveAll(tmp)
	files := map[string][]byte{train.MetadataFile: meta}
	for n, data := range b.Files {
		files[n] = data
	}
	srcJSON, _ := json.Marshal(src)
	files[sourceFile] = srcJSON
	for n, data := range files {
		if err := os.WriteFile(filepath.Join(tmp, n), data, 0o644); err != nil {
			return 0, false, fmt.Errorf("publish: %w", err)
		}
	}
	if err := atomicfile.PublishDir(tmp, r.Dir(model, version)); err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	if version == 1 || promote {
		if err := r.setDefault(model, version); err != nil {
			return 0, false, err
		}
		isDefault = true
	}
	return version, isDefault, nil
}

// publishSource checks a publish request and reads the bundle at dir:
// the bundle, its metadata file, and the source record naming the job and
// the metadata's hash (what makes publishing idempotent).
func publishSource(model, jobID, dir string) (*train.Bundle, []byte, source, error) {
	if !ValidName(model) {
		return nil, nil, source{}, fmt.Errorf("publish: invalid model name %q", model)
	}
	b, err := train.ReadBundle(dir)
	if err != nil {
		return nil, nil, source{}, fmt.Errorf("publish: %w", err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, train.MetadataFile))
	if err != nil {
		return nil, nil, source{}, fmt.Errorf("publish: %w", err)
	}
	return b, meta, source{JobID: jobID, Bundle: dir, Hash: digest(meta)}, nil
}

// setDefault points the model's default file at version.
func (r *Repository) setDefault(model string, version int64) error {
	if err := atomicfile.Write(filepath.Join(r.Root, model, "default"), []byte(strconv.FormatInt(version, 10)+"\n")); err != nil {
		return fmt.Errorf("set default version of %s: %w", model, err)
	}
	return nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
