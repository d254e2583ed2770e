package train

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Objects is where checkpoints are kept: a flat namespace of objects
// named by slash-separated keys ("checkpoints/ckpt-100"), each written
// whole and atomically (a reader sees the old object or the new one, never
// a part). Missing objects are errors matching fs.ErrNotExist; deleting one
// is not an error. A job directory's store (internal/storage.Store, on
// local disk or object storage alike) implements it; Dir is a bare local
// directory for tests and tools.
type Objects interface {
	Read(ctx context.Context, key string) ([]byte, error)
	Write(ctx context.Context, key string, data []byte) error
	Delete(ctx context.Context, key string) error
	// List returns the keys starting with prefix, in lexical order.
	List(ctx context.Context, prefix string) ([]string, error)
}

// Copier is implemented by Objects that copy an object without moving its
// bytes through the caller (a hard link on local disk, a server-side copy
// in object storage). Copy replaces dst atomically.
type Copier interface {
	Copy(ctx context.Context, dst, src string) error
}

// Checkpoints is a directory of checkpoints in an Objects: ckpt-<step>
// objects in the layout documented above, and the pointer object
// PointerFile naming the newest committed one, written after it. It is the
// one implementation of committing, retention, pinning and reading
// checkpoints, shared by Run, the data-parallel chief and parameter
// servers (train/dist), the evaluator and exporters. A Checkpoints is safe
// for concurrent use if its Objects is; one writer commits at a time.
type Checkpoints struct {
	st  Objects
	dir string // key prefix: "" or a key such as "checkpoints"
}

// NewCheckpoints returns the checkpoints under the key prefix dir of st
// ("" for its root).
func NewCheckpoints(st Objects, dir string) *Checkpoints {
	return &Checkpoints{st: st, dir: strings.Trim(dir, "/")}
}

// In returns the checkpoints under the key prefix dir of the same store,
// such as the pins of an evaluator.
func (c *Checkpoints) In(dir string) *Checkpoints { return NewCheckpoints(c.st, dir) }

func (c *Checkpoints) key(name string) string { return path.Join(c.dir, name) }

// Save commits ck: the checkpoint object, then the pointer naming it,
// then it deletes all but the newest keep checkpoints (keep ≤ 0 keeps
// all). Once Save returns, Latest and Read find ck. Saving a step again
// overwrites it with the same content. A checkpoint holding a NaN or an
// infinity is refused with ErrNonFinite and nothing is written.
func (c *Checkpoints) Save(ctx context.Context, ck *Checkpoint, keep int) error {
	b, err := ck.Encode()
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	name := CheckpointName(ck.Step)
	if err := c.st.Write(ctx, c.key(name), b); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := c.st.Write(ctx, c.key(PointerFile), []byte(name+"\n")); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if keep <= 0 {
		return nil
	}
	steps, err := c.Steps(ctx)
	if err != nil {
		return err
	}
	for _, s := range steps[:max(0, len(steps)-keep)] {
		if err := c.st.Delete(ctx, c.key(CheckpointName(s))); err != nil {
			return fmt.Errorf("delete old checkpoint: %w", err)
		}
	}
	return nil
}

// Steps returns the steps of the checkpoints present, oldest first,
// committed or not (an object written before its pointer).
func (c *Checkpoints) Steps(ctx context.Context) ([]int64, error) {
	prefix := c.key("ckpt-")
	keys, err := c.st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var steps []int64
	for _, k := range keys {
		if n, ok := CheckpointStep(path.Base(k)); ok && path.Dir(k) == path.Dir(prefix) {
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps, nil
}

// Newest returns the step of the checkpoint the pointer names, 0 if
// nothing has been committed.
func (c *Checkpoints) Newest(ctx context.Context) (int64, error) {
	b, err := c.st.Read(ctx, c.key(PointerFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read checkpoint pointer: %w", err)
	}
	name := strings.TrimSpace(string(b))
	n, ok := CheckpointStep(name)
	if !ok {
		return 0, fmt.Errorf("%w: pointer %s names %q", ErrCheckpoint, c.key(PointerFile), name)
	}
	return n, nil
}

// Latest reads the checkpoint the pointer names; (nil, nil) if nothing has
// been committed. A checkpoint pruned by a newer commit between reading the
// pointer and reading it sends Latest back to the pointer.
func (c *Checkpoints) Latest(ctx context.Context) (*Checkpoint, error) {
	for attempt := 1; ; attempt++ {
		b, err := c.st.Read(ctx, c.key(PointerFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint pointer: %w", err)
		}
		name := strings.TrimSpace(string(b))
		if _, ok := CheckpointStep(name); !ok {
			return nil, fmt.Errorf("%w: pointer %s names %q", ErrCheckpoint, c.key(PointerFile), name)
		}
		ck, err := readCheckpoint(ctx, c.st, c.key(name))
		if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
			continue
		}
		return ck, err
	}
}

// Read reads the checkpoint of step; a missing one is an error matching
// fs.ErrNotExist.
func (c *Checkpoints) Read(ctx context.Context, step int64) (*Checkpoint, error) {
	return readCheckpoint(ctx, c.st, c.key(CheckpointName(step)))
}

// Streamer is implemented by Objects that read an object as a stream, so
// that a part of it can be read without the rest (Checkpoints.Meta).
type Streamer interface {
	NewReader(ctx context.Context, key string) (io.ReadCloser, error)
}

// maxMetaBytes bounds the JSON meta of a checkpoint Meta reads: a model's
// description, a few hundred bytes.
const maxMetaBytes = 1 << 20

// Meta reads the meta of the checkpoint of step from the head of its
// object, without its tensors: a process that only needs to know what a
// checkpoint holds (how much memory loading it takes) does not hold the
// model. With Objects that are not a Streamer it reads the whole object.
// The checksum is not verified (whoever loads the checkpoint does); a
// head that is not a checkpoint of step is an error wrapping
// ErrCheckpoint, and a missing checkpoint one matching fs.ErrNotExist.
func (c *Checkpoints) Meta(ctx context.Context, step int64) (CheckpointMeta, error) {
	key := c.key(CheckpointName(step))
	var head io.Reader
	if s, ok := c.st.(Streamer); ok {
		r, err := s.NewReader(ctx, key)
		if err != nil {
			return CheckpointMeta{}, fmt.Errorf("read checkpoint: %w", err)
		}
		defer r.Close()
		head = r
	} else {
		b, err := c.st.Read(ctx, key)
		if err != nil {
			return CheckpointMeta{}, fmt.Errorf("read checkpoint: %w", err)
		}
		head = bytes.NewReader(b)
	}
	le := binary.LittleEndian
	var fixed [len(ckptMagic) + 4 + 8 + 4]byte
	if _, err := io.ReadFull(head, fixed[:]); err != nil || string(fixed[:len(ckptMagic)]) != ckptMagic {
		return CheckpointMeta{}, fmt.Errorf("%w: %s: not a trainflow checkpoint", ErrCheckpoint, key)
	}
	rest := fixed[len(ckptMagic):]
	if v := le.Uint32(rest); v != CheckpointVersion {
		return CheckpointMeta{}, fmt.Errorf("%w: %s: version %d, this build reads %d", ErrCheckpoint, key, v, CheckpointVersion)
	}
	if s := int64(le.Uint64(rest[4:])); s != step {
		return CheckpointMeta{}, fmt.Errorf("%w: %s holds step %d", ErrCheckpoint, key, s)
	}
	n := le.Uint32(rest[12:])
	if n > maxMetaBytes {
		return CheckpointMeta{}, fmt.Errorf("%w: %s: meta of %d bytes", ErrCheckpoint, key, n)
	}
	mb := make([]byte, n)
	if _, err := io.ReadFull(head, mb); err != nil {
		return CheckpointMeta{}, fmt.Errorf("%w: %s: meta: %v", ErrCheckpoint, key, err)
	}
	var meta CheckpointMeta
	if err := json.Unmarshal(mb, &meta); err != nil {
		return CheckpointMeta{}, fmt.Errorf("%w: %s: meta: %v", ErrCheckpoint, key, err)
	}
	return meta, nil
}

// Pin copies the checkpoint of step into the directory dir of the same
// store (dir/ckpt-<step>), where retention cannot delete it: a hard link on
// local disk, a copy in object storage. A missing checkpoint is an error
// matching fs.ErrNotExist.
func (c *Checkpoints) Pin(ctx context.Context, step int64, dir string) error {
	src, dst := c.key(CheckpointName(step)), path.Join(dir, CheckpointName(step))
	var err error
	if cp, ok := c.st.(Copier); ok {
		err = cp.Copy(ctx, dst, src)
	} else {
		var b []byte
		if b, err = c.st.Read(ctx, src); err == nil {
			err = c.st.Write(ctx, dst, b)
		}
	}
	if err != nil {
		return fmt.Errorf("pin checkpoint %d: %w", step, err)
	}
	return nil
}

// DeleteIf deletes the checkpoints whose step del reports true for.
func (c *Checkpoints) DeleteIf(ctx context.Context, del func(step int64) bool) error {
	steps, err := c.Steps(ctx)
	if err != nil {
		return err
	}
	for _, s := range steps {
		if del(s) {
			if err := c.st.Delete(ctx, c.key(CheckpointName(s))); err != nil {
				return fmt.Errorf("delete checkpoint %d: %w", s, err)
			}
		}
	}
	return nil
}

// readCheckpoint reads and verifies the checkpoint object at key.
func readCheckpoint(ctx context.Context, st Objects, key string) (*Checkpoint, error) {
	b, err := st.Read(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	ck, err := DecodeCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", key, err)
	}
	return ck, nil
}
