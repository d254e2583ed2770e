package bundle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/safefile"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// FormatVersion is the version of the bundle layout this build writes and
// reads.
const FormatVersion = 1

// The files of a bundle and of a repository's model directory.
const (
	ModelFile     = "model.ckpt"
	TransformFile = "transform.json"
	SignatureFile = "signature.json"
	MetadataFile  = "metadata.json"
	// SourceFile is added to a bundle published into a repository.
	SourceFile  = "source.json"
	DefaultFile = "default"
	ConfigFile  = "config.json"
)

// ErrBundle is wrapped by errors about a damaged or inconsistent bundle.
var ErrBundle = errors.New("bundle: bad bundle")

// Meta is the metadata.json of a bundle.
type Meta struct {
	FormatVersion int                  `json:"format_version"`
	JobID         string               `json:"job_id"`
	Exporter      string               `json:"exporter"`
	Step          int64                `json:"global_step"`
	Metrics       train.Metrics        `json:"metrics"`
	Model         train.CheckpointMeta `json:"model"`
	TransformHash string               `json:"transform_hash"`
	// Files maps each other file of the bundle to its hex SHA-256.
	Files map[string]string `json:"files"`
}

// Bundle is a loaded bundle whose files match the hashes in its metadata
// and whose model matches the metadata's description. Immutable once read.
type Bundle struct {
	// Dir is where the bundle was read from: a directory or a storage URI.
	Dir  string
	Meta Meta
	// Model is the bundle's model, of the type Meta.Model.Model names.
	Model train.Model
	// Files holds the content of every file but metadata.json.
	Files map[string][]byte
	// metadata is metadata.json as read.
	metadata []byte
}

// ID identifies the bundle's content: the SHA-256 of its metadata.json,
// which holds the hash of every other file.
func (b *Bundle) ID() string { return Digest(b.metadata) }

// Digest returns the hex SHA-256 of data: the hash a bundle records for
// each of its files and that identifies a bundle (of its metadata.json).
func Digest(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// signature is signature.json. Its field order is the one the format
// fixed (classes before inputs).
type signature struct {
	Classes []string           `json:"classes"`
	Inputs  []preprocess.Input `json:"inputs"`
}

// TransformFiles returns the files a bundle of a model trained with t
// carries besides the model: transform.json (raw, the artifact as
// preprocess wrote it) and signature.json.
func TransformFiles(t *preprocess.Transform, raw []byte) (map[string][]byte, error) {
	sig, err := json.MarshalIndent(signature{Classes: t.LabelVocab, Inputs: t.Signature()}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("bundle signature: %w", err)
	}
	return map[string][]byte{TransformFile: raw, SignatureFile: sig}, nil
}

// encode returns every file of the bundle of ck's model plus files
// (name → content, e.g. from TransformFiles), metadata.json included, with
// meta completed from ck.
func encode(ck *train.Checkpoint, files map[string][]byte, meta Meta) (map[string][]byte, error) {
	model := &train.Checkpoint{Step: ck.Step, Meta: ck.Meta, Tensors: map[string][]float64{"params": ck.Tensors["params"]}}
	mb, err := model.Encode()
	if err != nil {
		return nil, err
	}
	all := map[string][]byte{ModelFile: mb}
	maps.Copy(all, files)
	meta.FormatVersion = FormatVersion
	meta.Step = ck.Step
	meta.Model = ck.Meta
	meta.Files = map[string]string{}
	for name, b := range all {
		if !validFile(name) {
			return nil, fmt.Errorf("%w: file name %q", ErrBundle, name)
		}
		meta.Files[name] = Digest(b)
	}
	mj, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, err
	}
	all[MetadataFile] = append(mj, '\n')
	return all, nil
}

// validFile reports whether name can be a file of a bundle listed in its
// metadata.
func validFile(name string) bool {
	return name != MetadataFile && name != "" && name != "." && name != ".." && path.Base(name) == name && filepath.Base(name) == name
}

// Write writes the bundle of the model in ck plus files (name → content,
// usually TransformFiles) under the key version (decimal) of st, e.g. a
// job directory's export/<exporter>, and returns whether it wrote it. If
// that version already has a metadata.json it is left as is: exporting the
// same step twice does not make a second bundle.
func Write(ctx context.Context, st *storage.Store, version int64, ck *train.Checkpoint, files map[string][]byte, meta Meta) (bool, error) {
	key := strconv.FormatInt(version, 10)
	if ok, err := st.Exists(ctx, key+"/"+MetadataFile); err != nil || ok {
		return false, err
	}
	all, err := encode(ck, files, meta)
	if err != nil {
		return false, err
	}
	if err := put(ctx, st, key, all); errors.Is(err, fs.ErrExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("write bundle: %w", err)
	}
	return true, nil
}

// put publishes files (metadata.json among them) as the group under
// prefix of st: in a local directory through a temporary directory renamed
// into place, which fails with fs.ErrExist if prefix exists; in object
// storage by putting every file, metadata.json last, over whatever a
// failed attempt left there.
func put(ctx context.Context, st *storage.Store, prefix string, files map[string][]byte) error {
	if root, ok := st.LocalDir(); ok {
		dst := filepath.Join(root, filepath.FromSlash(prefix))
		parent := filepath.Dir(dst)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
		tmp, err := os.MkdirTemp(parent, ".tmp-"+filepath.Base(dst)+"-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
				return err
			}
		}
		return atomicfile.PublishDir(tmp, dst)
	}
	if err := st.DeleteAll(ctx, prefix+"/"); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if name == MetadataFile {
			continue
		}
		if err := st.Write(ctx, prefix+"/"+name, files[name]); err != nil {
			return err
		}
	}
	// The marker: from here on the group exists.
	return st.Write(ctx, prefix+"/"+MetadataFile, files[MetadataFile])
}

// Delete removes the bundle in st (a store opened at the bundle), its
// metadata.json first so that no reader takes the rest for a bundle.
// Deleting a bundle that is gone succeeds.
func Delete(ctx context.Context, st *storage.Store) error {
	if err := st.Delete(ctx, MetadataFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := st.DeleteAll(ctx, ""); err != nil {
		return err
	}
	if dir, ok := st.LocalDir(); ok {
		return os.RemoveAll(dir)
	}
	return nil
}

// Read reads and verifies the bundle at loc: a local directory, or a
// storage URI (see internal/storage). models builds its model (nil: the
// built-in types only); a bundle of a type models does not know is an
// error wrapping ErrBundle and train.ErrUnknownModel that names the type.
func Read(ctx context.Context, loc string, models *train.Registry) (*Bundle, error) {
	if !strings.Contains(loc, "://") {
		return ReadDir(loc, models)
	}
	st, err := storage.Open(ctx, loc)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return ReadStore(ctx, st, st.URI(), models)
}

// ReadDir reads and verifies the bundle in the local directory dir, its
// model built by models (see Read). dir and its files are trusted (a
// bundle this worker wrote, e.g. in its model repository): links are
// followed and the files read whole; a bundle a program wrote is read by
// ReadUntrusted.
func ReadDir(dir string, models *train.Registry) (*Bundle, error) {
	return read(dir, models, func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) })
}

// ReadLimits bound what ReadUntrusted reads of a bundle a program wrote:
// the size of each file and of all of them together (zero fields: 256
// MiB and 1 GiB, safefile.DefaultFile and safefile.DefaultTotal; the
// bundles of the built-in model types are far smaller).
type ReadLimits = safefile.Limits

// ReadUntrusted reads and verifies the bundle that an untrusted program
// wrote in the directory dir (slash-separated, relative to root, e.g. a
// job directory's jobdir.AppModelDir), its model built by models (see
// Read). root is the operator's and trusted; nothing under it is: every
// component of dir and every file of the bundle is opened without
// following a link (a link, a named pipe, a device or a hard-linked file
// is refused unread, never blocking), and each file is sized against lim
// before it is read. Its errors name the file and why (see package
// safefile), never its content. Bundle.Dir is root joined with dir.
func ReadUntrusted(root, dir string, models *train.Registry, lim ReadLimits) (*Bundle, error) {
	loc := filepath.Join(root, filepath.FromSlash(dir))
	d, err := safefile.OpenDir(root, dir, lim)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBundle, loc, err)
	}
	defer d.Close()
	return read(loc, models, d.ReadFile)
}

// ReadStore reads and verifies the bundle in st (a store opened at the
// bundle, or a Sub of one), its model built by models (see Read); loc
// names it in errors and in Bundle.Dir.
func ReadStore(ctx context.Context, st *storage.Store, loc string, models *train.Registry) (*Bundle, error) {
	return read(loc, models, func(name string) ([]byte, error) { return st.Read(ctx, name) })
}

// read loads a bundle through file, which returns the content of one of
// its files, and verifies every file against the hashes in its metadata
// and the model against the metadata's description.
func read(loc string, models *train.Registry, file func(name string) ([]byte, error)) (*Bundle, error) {
	mb, err := file(MetadataFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBundle, loc, err)
	}
	b := &Bundle{Dir: loc, Files: map[string][]byte{}, metadata: mb}
	if err := json.Unmarshal(mb, &b.Meta); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) { // its text quotes a byte of the file
			return nil, fmt.Errorf("%w: %s: metadata: not JSON (at byte %d)", ErrBundle, loc, se.Offset)
		}
		return nil, fmt.Errorf("%w: %s: metadata: %v", ErrBundle, loc, err)
	}
	if b.Meta.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%w: %s: format version %d, this build reads %d", ErrBundle, loc, b.Meta.FormatVersion, FormatVersion)
	}
	for _, n := range slices.Sorted(maps.Keys(b.Meta.Files)) {
		if !validFile(n) {
			return nil, fmt.Errorf("%w: %s: file name %q", ErrBundle, loc, n)
		}
		data, err := file(n)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBundle, loc, err)
		}
		if Digest(data) != b.Meta.Files[n] {
			return nil, fmt.Errorf("%w: %s: %s does not match its hash", ErrBundle, loc, n)
		}
		b.Files[n] = data
	}
	ck, err := train.DecodeCheckpoint(b.Files[ModelFile])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBundle, loc, err)
	}
	if !ck.Meta.Equal(b.Meta.Model) {
		return nil, fmt.Errorf("%w: %s: model %+v does not match metadata %+v", ErrBundle, loc, ck.Meta, b.Meta.Model)
	}
	if b.Model, err = models.Load(ck); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBundle, loc, err)
	}
	return b, nil
}

// Transform parses the bundle's transform.json and checks that it is the
// Transform the model was trained with (its hash is the one the metadata
// and the model record) and that it gives the model's input dimension and
// classes.
func (b *Bundle) Transform() (*preprocess.Transform, error) {
	raw, ok := b.Files[TransformFile]
	if !ok {
		return nil, fmt.Errorf("%w: %s has no %s", ErrBundle, b.Dir, TransformFile)
	}
	t, err := preprocess.ParseTransform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBundle, b.Dir, err)
	}
	switch {
	case t.Hash != b.Meta.TransformHash || t.Hash != b.Meta.Model.TransformHash:
		return nil, fmt.Errorf("%w: %s: transform %s is not the one the model was trained with (%s)", ErrBundle, b.Dir, t.Hash, b.Meta.Model.TransformHash)
	case t.Dim != b.Model.InputDim() || t.Classes() != b.Model.NumClasses():
		return nil, fmt.Errorf("%w: %s: transform gives %d features and %d classes, model takes %d and %d", ErrBundle, b.Dir, t.Dim, t.Classes(), b.Model.InputDim(), b.Model.NumClasses())
	}
	return t, nil
}

// Save writes the bundle's files, as read and verified, under prefix of
// st (see put): a copy of an untrusted bundle that holds exactly what
// was verified. It fails with fs.ErrExist if a local prefix exists.
func (b *Bundle) Save(ctx context.Context, st *storage.Store, prefix string) error {
	files := maps.Clone(b.Files)
	files[MetadataFile] = b.metadata
	return put(ctx, st, prefix, files)
}
