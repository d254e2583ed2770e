package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trainflow/trainflow/internal/atomicfile"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/train"
)

// ObjectRepository is a model repository in a storage.Store (object
// storage such as s3:// or MinIO, or a file:// bucket), with the layout of
// Repository as objects:
//
//	<model>/<version>/...          an export bundle (version = 1, 2, …)
//	<model>/<version>/metadata.json written last: the version's marker
//	<model>/default                the default version number
//	<model>/config.json            optional, as in Repository
//
// Objects of a version appear one by one, so a version is complete, and
// exists for readers, only once its metadata.json does: PublishVersion
// writes every other file of the bundle, and source.json, first. The
// prediction server does not read the store directly: Sync mirrors the
// complete versions into a local Repository that a Registry loads.
//
// Publishes of the same model must not run concurrently (object stores
// have no rename to claim a version number with); a retried publish of
// the same bundle is idempotent.
type ObjectRepository struct {
	Store *storage.Store
}

// modelObjects is what a listing of the store says about one model.
type modelObjects struct {
	complete []int64 // versions with metadata.json, ascending
	other    []int64 // versions with objects but no metadata.json
}

// scan lists the store and groups its keys by model.
func (o *ObjectRepository) scan(ctx context.Context, prefix string) (map[string]*modelObjects, error) {
	keys, err := o.Store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	models := map[string]*modelObjects{}
	partial := map[string]map[int64]bool{}
	for _, k := range keys {
		parts := strings.SplitN(k, "/", 3)
		if !ValidName(parts[0]) {
			continue
		}
		m := models[parts[0]]
		if m == nil {
			m = &modelObjects{}
			models[parts[0]] = m
			partial[parts[0]] = map[int64]bool{}
		}
		if len(parts) < 3 {
			continue // default, config.json
		}
		v, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || v <= 0 || strconv.FormatInt(v, 10) != parts[1] {
			continue
		}
		if parts[2] == train.MetadataFile {
			m.complete = append(m.complete, v)
		} else {
			partial[parts[0]][v] = true
		}
	}
	for name, m := range models {
		slices.Sort(m.complete)
		for v := range partial[name] {
			if _, ok := slices.BinarySearch(m.complete, v); !ok {
				m.other = append(m.other, v)
			}
		}
		slices.Sort(m.other)
	}
	return models, nil
}

// Versions lists the complete versions of model, lowest first.
func (o *ObjectRepository) Versions(ctx context.Context, model string) ([]int64, error) {
	if !ValidName(model) {
		return nil, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	ms, err := o.scan(ctx, model+"/")
	if err != nil {
		return nil, fmt.Errorf("list versions of %s: %w", model, err)
	}
	if m := ms[model]; m != nil {
		return m.complete, nil
	}
	return nil, nil
}

// Default returns the default version of model: the one its default
// object names, else the highest complete one.
func (o *ObjectRepository) Default(ctx context.Context, model string) (int64, error) {
	if !ValidName(model) {
		return 0, fmt.Errorf("%w: model name %q", ErrNotFound, model)
	}
	b, err := o.Store.Read(ctx, model+"/default")
	if err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return v, nil
		}
	} else if !errors.Is(err, storage.ErrNotExist) {
		return 0, err
	}
	vs, err := o.Versions(ctx, model)
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		return 0, fmt.Errorf("%w: model %q has no versions", ErrNotFound, model)
	}
	return vs[len(vs)-1], nil
}

// PublishVersion is Repository.PublishVersion for object storage: it
// uploads the bundle in dir as the next version of model and returns that
// version and whether it is the default (the first version of a model is,
// a later one only with promote). A bundle already published (same
// metadata hash) returns its existing version, promoted if asked. The
// bundle's files and source.json go first, metadata.json last, then the
// default object; a publish that fails midway leaves an incomplete
// version that readers ignore and the next publish overwrites.
func (o *ObjectRepository) PublishVersion(ctx context.Context, model, jobID, dir string, promote bool) (version int64, isDefault bool, err error) {
	b, meta, src, err := publishSource(model, jobID, dir)
	if err != nil {
		return 0, false, err
	}
	vs, err := o.Versions(ctx, model)
	if err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	for _, v := range vs {
		var s source
		raw, err := o.Store.Read(ctx, o.key(model, v, sourceFile))
		if err != nil && !errors.Is(err, storage.ErrNotExist) {
			return 0, false, fmt.Errorf("publish: %w", err)
		}
		if err == nil && json.Unmarshal(raw, &s) == nil && s.Hash == src.Hash {
			if promote {
				if err := o.setDefault(ctx, model, v); err != nil {
					return 0, false, err
				}
			}
			d, err := o.Default(ctx, model)
			return v, err == nil && d == v, err
		}
	}
	version = 1
	if len(vs) > 0 {
		version = vs[len(vs)-1] + 1
	}
	// An earlier publish may have left part of this version: start clean.
	if err := o.Store.DeleteAll(ctx, o.key(model, version, "")); err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	srcJSON, _ := json.Marshal(src)
	for _, n := range slices.Sorted(maps.Keys(b.Files)) {
		if err := o.Store.Write(ctx, o.key(model, version, n), b.Files[n]); err != nil {
			return 0, false, fmt.Errorf("publish: %w", err)
		}
	}
	if err := o.Store.Write(ctx, o.key(model, version, sourceFile), srcJSON); err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	// The marker: from here on the version exists.
	if err := o.Store.Write(ctx, o.key(model, version, train.MetadataFile), meta); err != nil {
		return 0, false, fmt.Errorf("publish: %w", err)
	}
	if version == 1 || promote {
		if err := o.setDefault(ctx, model, version); err != nil {
			return 0, false, err
		}
		isDefault = true
	}
	return version, isDefault, nil
}

// key is the key of a file of a version; name "" gives the version's
// prefix, ending in "/".
func (o *ObjectRepository) key(model string, version int64, name string) string {
	return path.Join(model, strconv.FormatInt(version, 10)) + "/" + name
}

// setDefault writes the model's default object.
func (o *ObjectRepository) setDefault(ctx context.Context, model string, version int64) error {
	if err := o.Store.Write(ctx, model+"/default", []byte(strconv.FormatInt(version, 10)+"\n")); err != nil {
		return fmt.Errorf("set default version of %s: %w", model, err)
	}
	return nil
}

// Sync makes the local repository dst a mirror of the complete versions in
// o, and of each model's default and config.json: it downloads versions
// dst lacks (each into a temporary directory, then renamed into place, so
// a Registry over dst never sees part of one), removes versions and models
// the store no longer has, and rewrites default and config.json when they
// differ. It reports whether it changed dst. A version already in dst is
// not compared with the store: a version number deleted and published
// again is not fetched again. dst must be this mirror's own directory,
// written by one Sync at a time.
func (o *ObjectRepository) Sync(ctx context.Context, dst *Repository) (changed bool, err error) {
	ms, err := o.scan(ctx, "")
	if err != nil {
		return false, fmt.Errorf("sync models: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(ms)) {
		c, err := o.syncModel(ctx, name, ms[name].complete, dst)
		changed = changed || c
		if err != nil {
			return changed, err
		}
	}
	local, err := dst.Models()
	if err != nil {
		return changed, err
	}
	for _, name := range local {
		if ms[name] == nil {
			if err := os.RemoveAll(filepath.Join(dst.Root, name)); err != nil {
				return changed, fmt.Errorf("sync %s: %w", name, err)
			}
			changed = true
		}
	}
	return changed, nil
}

// syncModel mirrors one model's complete versions vs, then its default and
// config.json.
func (o *ObjectRepository) syncModel(ctx context.Context, name string, vs []int64, dst *Repository) (changed bool, err error) {
	have, err := dst.Versions(name)
	if err != nil {
		return false, err
	}
	for _, v := range vs {
		if slices.Contains(have, v) {
			continue
		}
		if err := o.download(ctx, name, v, dst); err != nil {
			return changed, err
		}
		changed = true
	}
	for _, v := range have {
		if !slices.Contains(vs, v) {
			if err := os.RemoveAll(dst.Dir(name, v)); err != nil {
				return changed, fmt.Errorf("sync %s/%d: %w", name, v, err)
			}
			changed = true
		}
	}
	for _, f := range []string{"default", "config.json"} {
		c, err := o.syncFile(ctx, name+"/"+f, filepath.Join(dst.Root, name, f))
		changed = changed || c
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// download copies one version into dst through a temporary directory.
func (o *ObjectRepository) download(ctx context.Context, name string, v int64, dst *Repository) error {
	parent := filepath.Join(dst.Root, name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("sync %s/%d: %w", name, v, err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-sync-")
	if err != nil {
		return fmt.Errorf("sync %s/%d: %w", name, v, err)
	}
	defer os.RemoveAll(tmp)
	if err := o.Store.DownloadDir(ctx, o.key(name, v, ""), tmp); err != nil {
		return fmt.Errorf("sync %s/%d: %w", name, v, err)
	}
	if err := atomicfile.PublishDir(tmp, dst.Dir(name, v)); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sync %s/%d: %w", name, v, err)
	}
	return nil
}

// syncFile makes the local file p hold the object at key, or removes it if
// there is no such object.
func (o *ObjectRepository) syncFile(ctx context.Context, key, p string) (changed bool, err error) {
	want, err := o.Store.Read(ctx, key)
	if errors.Is(err, storage.ErrNotExist) {
		err := os.Remove(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("sync %s: %w", key, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("sync %s: %w", key, err)
	}
	if got, err := os.ReadFile(p); err == nil && bytes.Equal(got, want) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, fmt.Errorf("sync %s: %w", key, err)
	}
	if err := atomicfile.Write(p, want); err != nil {
		return false, fmt.Errorf("sync %s: %w", key, err)
	}
	return true, nil
}

// Mirror syncs src into dst every interval until ctx is done and reloads
// reg (a Registry over dst) after every sync that changed dst. A failed
// sync is logged and retried at the next tick; the versions already
// mirrored keep serving.
func Mirror(ctx context.Context, src *ObjectRepository, dst *Repository, reg *Registry, interval time.Duration, log *slog.Logger) {
	log = log.With("component", "mirror")
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			changed, err := src.Sync(ctx, dst)
			if err != nil && ctx.Err() == nil {
				log.Error("sync models", "store", src.Store.URI(), "error", err)
			}
			if !changed {
				continue
			}
			if err := reg.Reload(); err != nil {
				log.Error("reload models", "error", err)
			}
		}
	}
}
