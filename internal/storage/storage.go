package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/fileblob"  // file://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/memblob"   // mem://
	_ "gocloud.dev/blob/s3blob"    // s3://
	"gocloud.dev/gcerrors"

	"github.com/trainflow/trainflow/internal/atomicfile"
)

// Errors. Every error a Store returns names the URI of the object or prefix
// at fault.
var (
	// ErrNotExist is wrapped by errors about an object that does not exist.
	// It matches fs.ErrNotExist too: errors.Is(err, fs.ErrNotExist) holds.
	ErrNotExist error = notExistError{}
	// ErrInvalidKey is wrapped by errors about a key or prefix that breaks
	// the key rules in the package documentation.
	ErrInvalidKey = errors.New("storage: invalid key")
	// ErrInvalidURI is wrapped by errors about a URI that Open cannot parse.
	ErrInvalidURI = errors.New("storage: invalid URI")
)

// notExistError is the type of ErrNotExist.
type notExistError struct{}

func (notExistError) Error() string        { return "storage: object does not exist" }
func (notExistError) Is(target error) bool { return target == fs.ErrNotExist }

// Store is a directory-like view of a bucket: objects named by keys
// relative to the Store's URI. A Store is safe for concurrent use.
type Store struct {
	b     *blob.Bucket
	loc   location
	sub   string // prefix added by Sub: "" or a clean key followed by "/"
	err   error  // a bad Sub prefix, returned by every method
	owner bool   // Close closes b
}

// memBuckets holds the mem:// buckets by name, so every Open of the same
// name in one process sees the same objects. They live until the process
// exits.
var memBuckets struct {
	sync.Mutex
	m map[string]*blob.Bucket
}

// Open opens the Store at uri: a bucket URL with an optional prefix path
// ("s3://bucket/jobs/census_1?region=eu-west-1"), or a local directory
// path without a scheme, which means file://. The package documentation
// lists the schemes and their query parameters. A file:// directory is
// created if missing. Open checks the URI but does not contact the storage
// service, so a wrong endpoint or missing permission shows up in the first
// call; gs:// does look up Google application default credentials.
func Open(ctx context.Context, uri string) (*Store, error) {
	loc, err := parseURI(uri)
	if err != nil {
		return nil, err
	}
	s := &Store{loc: loc, owner: true}
	if loc.scheme == "mem" {
		s.owner = false
		memBuckets.Lock()
		defer memBuckets.Unlock()
		if b := memBuckets.m[loc.bucket]; b != nil {
			s.b = b
			return s, nil
		}
	}
	b, err := blob.OpenBucket(ctx, loc.bucketURL())
	if err != nil {
		return nil, fmt.Errorf("open storage %s: %w", loc.uri("", true), err)
	}
	s.b = b
	if loc.scheme == "mem" {
		if memBuckets.m == nil {
			memBuckets.m = map[string]*blob.Bucket{}
		}
		memBuckets.m[loc.bucket] = b
	}
	return s, nil
}

// Sub returns the Store for the keys under prefix, which is a key, a key
// followed by "/", or "" for s itself. The result shares s's connection:
// closing it does nothing, and it must not be used after s is closed. An
// invalid prefix makes every method of the result return an error wrapping
// ErrInvalidKey.
func (s *Store) Sub(prefix string) *Store {
	t := *s
	t.owner = false
	if t.err != nil || prefix == "" {
		return &t
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if err := checkKey(prefix); err != nil {
		t.err = fmt.Errorf("sub %s: %w", s.location(""), err)
		return &t
	}
	t.sub += prefix + "/"
	return &t
}

// URI returns the URI of s in the form Open accepts, including Sub
// prefixes and the query parameters Open was given, so another process can
// open the same place: Open(ctx, s.URI()) is equivalent to s.
func (s *Store) URI() string { return s.loc.uri(s.sub, true) }

// LocalDir returns the directory that holds s's objects when s is a file://
// Store, and false otherwise. Callers can use it to skip staging: each key
// is the slash-separated path of a file under it.
func (s *Store) LocalDir() (string, bool) {
	if s.loc.scheme != "file" {
		return "", false
	}
	return filepath.FromSlash(path.Join(s.loc.root, s.loc.prefix, s.sub)), true
}

// Close releases the connection of a Store returned by Open. It does nothing
// for Stores returned by Sub and for mem:// Stores.
func (s *Store) Close() error {
	if !s.owner {
		return nil
	}
	if err := s.b.Close(); err != nil {
		return fmt.Errorf("close storage %s: %w", s.location(""), err)
	}
	return nil
}

// location names the object or prefix key of s in errors: its URI without
// the query.
func (s *Store) location(key string) string { return s.loc.uri(s.sub+key, false) }

// full checks key and returns it relative to the bucket.
func (s *Store) full(op, key string) (string, error) {
	if s.err != nil {
		return "", fmt.Errorf("%s %q: %w", op, key, s.err)
	}
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("%s %s: %w", op, s.location(""), err)
	}
	return s.loc.prefix + s.sub + key, nil
}

// wrap names op and the object at key in err, mapping a missing object to
// ErrNotExist.
func (s *Store) wrap(op, key string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%s %s: %w", op, s.location(key), ErrNotExist)
	}
	return fmt.Errorf("%s %s: %w", op, s.location(key), err)
}

// Read returns the content of the object at key.
func (s *Store) Read(ctx context.Context, key string) ([]byte, error) {
	k, err := s.full("read", key)
	if err != nil {
		return nil, err
	}
	b, err := s.b.ReadAll(ctx, k)
	if err != nil {
		return nil, s.wrap("read", key, err)
	}
	return b, nil
}

// NewReader opens the object at key for streaming. The caller must close
// it. Errors while reading are not wrapped with the key.
func (s *Store) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := s.full("read", key)
	if err != nil {
		return nil, err
	}
	r, err := s.b.NewReader(ctx, k, nil)
	if err != nil {
		return nil, s.wrap("read", key, err)
	}
	return r, nil
}

// Exists reports whether an object exists at key. A prefix of other keys
// (a "directory") is not an object.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	k, err := s.full("stat", key)
	if err != nil {
		return false, err
	}
	ok, err := s.b.Exists(ctx, k)
	if err != nil {
		return false, s.wrap("stat", key, err)
	}
	return ok, nil
}

// Write stores data at key, replacing any object there. Readers see the old
// object or the new one, never a part; see WriteFunc.
func (s *Store) Write(ctx context.Context, key string, data []byte) error {
	return s.WriteFunc(ctx, key, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc stores what fill writes at key, replacing any object there. The
// object becomes visible only once fill has returned nil and the upload is
// committed; if fill fails, panics or ctx ends first, the write is aborted
// and key keeps its old object (or none). On file:// the content is fsynced
// before the rename that publishes it, and the directory after, so it also
// survives an operating system crash; the temporary file's name shares
// nothing with key's (see writeFile).
func (s *Store) WriteFunc(ctx context.Context, key string, fill func(w io.Writer) error) error {
	k, err := s.full("write", key)
	if err != nil {
		return err
	}
	if s.loc.scheme == "file" {
		if err := s.writeFile(ctx, k, fill); err != nil {
			return s.wrap("write", key, err)
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.b.NewWriter(ctx, k, &blob.WriterOptions{DisableContentTypeDetection: true})
	if err != nil {
		return s.wrap("write", key, err)
	}
	closed := false
	defer func() {
		if !closed { // fill panicked: abort, then let the panic go on
			cancel()
			w.Close()
		}
	}()
	if err := fill(w); err != nil {
		closed = true
		cancel() // a canceled writer discards what it has on Close
		w.Close()
		return s.wrap("write", key, err)
	}
	closed = true
	if err := w.Close(); err != nil {
		return s.wrap("write", key, err)
	}
	return nil
}

// writeFile is WriteFunc on file:// for the bucket key k. It does what the
// file driver would (a temporary file in the destination's directory,
// renamed over it) except for the temporary file's name: the driver's is
// "<key>.<hex>.tmp", which holds the destination's name, and programs
// that watch a directory by name pattern take it for the file itself.
// TensorBoard counts any name containing "tfevents" as an event file,
// moves on to the temporary one, and is stuck there once it is renamed
// away. Ours is "." + tempSuffix(): hidden, matching no pattern of a
// destination, and still a name List hides (isTempName).
func (s *Store) writeFile(ctx context.Context, k string, fill func(w io.Writer) error) (err error) {
	dst := filepath.Join(filepath.FromSlash(s.loc.root), filepath.FromSlash(k))
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, s.loc.dirMode()); err != nil {
		return err
	}
	f, err := atomicfile.CreateTemp(dir)
	if err != nil {
		return err
	}
	published := false
	defer func() { // also when fill panics
		if !published {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := fill(f); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return err
	}
	published = true
	return atomicfile.SyncDir(dir)
}

// Delete removes the object at key. Deleting a missing object is not an
// error, so a retried cleanup succeeds.
func (s *Store) Delete(ctx context.Context, key string) error {
	k, err := s.full("delete", key)
	if err != nil {
		return err
	}
	if err := s.b.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return s.wrap("delete", key, err)
	}
	return nil
}

// DeleteAll removes every object whose key starts with prefix; "" removes
// everything in s. Like os.RemoveAll, nothing to delete is not an error.
func (s *Store) DeleteAll(ctx context.Context, prefix string) error {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// List returns the keys of the objects in s that start with prefix, in
// lexical byte order, relative to s (so s.Read works on each). prefix is
// "", a key, or a key followed by "/"; its last segment may be partial, so
// List(ctx, "checkpoints/ckpt-") finds ckpt-1, ckpt-20 …. List descends
// into every level below prefix. Use a prefix ending in "/" to list a
// "directory": "export/best" also matches "export/best_old/x".
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if s.err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, s.err)
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list %s: %w", s.location(""), err)
	}
	base := s.loc.prefix + s.sub
	it := s.b.List(&blob.ListOptions{Prefix: base + prefix})
	var keys []string
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return keys, nil
		}
		if err != nil {
			return nil, s.wrap("list", prefix, err)
		}
		k := strings.TrimPrefix(obj.Key, base)
		if obj.IsDir || strings.HasSuffix(k, "/") || isTempName(k) {
			continue // directory markers and crashed temporary files
		}
		keys = append(keys, k)
	}
}

// hasPrefix reports whether any object key starts with prefix.
func (s *Store) hasPrefix(ctx context.Context, prefix string) (bool, error) {
	it := s.b.List(&blob.ListOptions{Prefix: s.loc.prefix + s.sub + prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, s.wrap("list", prefix, err)
		}
		if !obj.IsDir && !strings.HasSuffix(obj.Key, "/") && !isTempName(obj.Key) {
			return true, nil
		}
	}
}
