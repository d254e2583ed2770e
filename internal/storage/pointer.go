package storage

import (
	"context"
	"fmt"
	"path"
	"strings"
)

// CommitPointer makes the pointer object at key name target, after checking
// that target exists: as an object, or as a prefix with at least one object
// under it (a directory such as an export bundle). target is relative to the
// directory of key, like a relative symbolic link: the pointer
// "checkpoints/checkpoint" naming "ckpt-100" means "checkpoints/ckpt-100".
// The pointer's content is target followed by a newline, the format of
// train.PointerFile.
//
// Write target completely first, then call CommitPointer: a reader that
// finds the object through ReadPointer never sees it missing or partial. A
// missing target is an error wrapping ErrNotExist, and the pointer is left
// as it was.
func (s *Store) CommitPointer(ctx context.Context, key, target string) error {
	if _, err := s.full("commit pointer", key); err != nil {
		return err
	}
	if err := checkKey(target); err != nil {
		return fmt.Errorf("commit pointer %s: target: %w", s.location(key), err)
	}
	t := path.Join(path.Dir(key), target)
	ok, err := s.Exists(ctx, t)
	if err == nil && !ok {
		ok, err = s.hasPrefix(ctx, t+"/")
	}
	if err != nil {
		return fmt.Errorf("commit pointer %s: %w", s.location(key), err)
	}
	if !ok {
		return fmt.Errorf("commit pointer %s: target %s: %w", s.location(key), s.location(t), ErrNotExist)
	}
	if err := s.Write(ctx, key, []byte(target+"\n")); err != nil {
		return fmt.Errorf("commit pointer: %w", err)
	}
	return nil
}

// ReadPointer returns the key, relative to s, that the pointer object at
// key names. A missing pointer is an error wrapping ErrNotExist: nothing has
// been committed yet.
//
// The target can disappear after ReadPointer returns if a writer commits a
// newer one and prunes the old: a reader that then gets ErrNotExist should
// read the pointer again.
func (s *Store) ReadPointer(ctx context.Context, key string) (string, error) {
	b, err := s.Read(ctx, key)
	if err != nil {
		return "", fmt.Errorf("read pointer: %w", err)
	}
	target := strings.TrimSpace(string(b))
	if err := checkKey(target); err != nil {
		return "", fmt.Errorf("read pointer %s: %w", s.location(key), err)
	}
	return path.Join(path.Dir(key), target), nil
}
