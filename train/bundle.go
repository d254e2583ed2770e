package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// An export bundle is a directory holding everything a server needs to
// answer predictions, and nothing outside it:
//
//	model.ckpt      the model's variables (checkpoint layout, tensor "params")
//	transform.json  the preprocessing Transform the model was trained with
//	signature.json  the raw inputs and label classes
//	metadata.json   BundleMeta: what, from where, and the SHA-256 of every file
//
// Bundles are written to a temporary directory and renamed into place as
// <parent>/<version>, so a reader never sees half a bundle.
const (
	// BundleVersion is the version of the layout this build writes.
	BundleVersion = 1
	ModelFile     = "model.ckpt"
	MetadataFile  = "metadata.json"
)

// ErrBundle is wrapped by errors about a damaged or inconsistent bundle.
var ErrBundle = errors.New("train: bad bundle")

// BundleMeta is the metadata.json of a bundle.
type BundleMeta struct {
	FormatVersion int            `json:"format_version"`
	JobID         string         `json:"job_id"`
	Exporter      string         `json:"exporter"`
	Step          int64          `json:"global_step"`
	Metrics       Metrics        `json:"metrics"`
	Model         CheckpointMeta `json:"model"`
	TransformHash string         `json:"transform_hash"`
	// Files maps each other file of the bundle to its hex SHA-256.
	Files map[string]string `json:"files"`
}

// Bundle is a loaded, verified export bundle.
type Bundle struct {
	Dir  string
	Meta BundleMeta
	// Model is the bundle's model, of the type Meta.Model.Model names.
	Model Model
	// Files holds the content of every file but metadata.json.
	Files map[string][]byte
}

// WriteBundle writes a bundle of the model in ck plus files (name →
// content, e.g. transform.json) as <parent>/<version>. If that version
// already exists it is left as is and its path returned: exporting the same
// step twice does not create a second bundle.
func WriteBundle(parent string, version int64, ck *Checkpoint, files map[string][]byte, meta BundleMeta) (string, error) {
	dst := filepath.Join(parent, strconv.FormatInt(version, 10))
	if _, err := os.Stat(filepath.Join(dst, MetadataFile)); err == nil {
		return dst, nil
	}
	model := &Checkpoint{Step: ck.Step, Meta: ck.Meta, Tensors: map[string][]float64{"params": ck.Tensors["params"]}}
	mb, err := model.Encode()
	if err != nil {
		return "", err
	}
	all := map[string][]byte{ModelFile: mb}
	for k, v := range files {
		all[k] = v
	}
	meta.FormatVersion = BundleVersion
	meta.Step = ck.Step
	meta.Model = ck.Meta
	meta.Files = map[string]string{}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("write bundle: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-"+strconv.FormatInt(version, 10)+"-")
	if err != nil {
		return "", fmt.Errorf("write bundle: %w", err)
	}
	defer os.RemoveAll(tmp)
	for name, b := range all {
		if name == MetadataFile || filepath.Base(name) != name {
			return "", fmt.Errorf("%w: file name %q", ErrBundle, name)
		}
		meta.Files[name] = digest(b)
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return "", fmt.Errorf("write bundle: %w", err)
		}
	}
	mj, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, MetadataFile), append(mj, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write bundle: %w", err)
	}
	if err := atomicfile.PublishDir(tmp, dst); err != nil {
		if errors.Is(err, os.ErrExist) {
			return dst, nil
		}
		return "", err
	}
	return dst, nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ReadBundle loads the bundle in dir and verifies every file against the
// hashes in its metadata.
func ReadBundle(dir string) (*Bundle, error) {
	mb, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBundle, dir, err)
	}
	b := &Bundle{Dir: dir, Files: map[string][]byte{}}
	if err := json.Unmarshal(mb, &b.Meta); err != nil {
		return nil, fmt.Errorf("%w: %s: metadata: %v", ErrBundle, dir, err)
	}
	if b.Meta.FormatVersion != BundleVersion {
		return nil, fmt.Errorf("%w: %s: format version %d, this build reads %d", ErrBundle, dir, b.Meta.FormatVersion, BundleVersion)
	}
	names := make([]string, 0, len(b.Meta.Files))
	for n := range b.Meta.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if filepath.Base(n) != n || n == MetadataFile {
			return nil, fmt.Errorf("%w: %s: file name %q", ErrBundle, dir, n)
		}
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBundle, dir, err)
		}
		if digest(data) != b.Meta.Files[n] {
			return nil, fmt.Errorf("%w: %s: %s does not match its hash", ErrBundle, dir, n)
		}
		b.Files[n] = data
	}
	ck, err := DecodeCheckpoint(b.Files[ModelFile])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBundle, dir, err)
	}
	if !ck.Meta.Equal(b.Meta.Model) {
		return nil, fmt.Errorf("%w: %s: model %+v does not match metadata %+v", ErrBundle, dir, ck.Meta, b.Meta.Model)
	}
	if b.Model, err = Load(ck); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBundle, dir, err)
	}
	return b, nil
}
