package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestPointer(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, s *Store) {
		// Nothing to point at yet: the commit fails and leaves no pointer.
		err := s.CommitPointer(ctx, "checkpoints/checkpoint", "ckpt-5")
		if !errors.Is(err, ErrNotExist) {
			t.Fatalf("CommitPointer to a missing target: got %v, want ErrNotExist", err)
		}
		if _, err := s.ReadPointer(ctx, "checkpoints/checkpoint"); !errors.Is(err, ErrNotExist) {
			t.Fatalf("ReadPointer after a refused commit: got %v, want ErrNotExist", err)
		}

		if err := s.Write(ctx, "checkpoints/ckpt-5", []byte("five")); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitPointer(ctx, "checkpoints/checkpoint", "ckpt-5"); err != nil {
			t.Fatal(err)
		}
		got, err := s.ReadPointer(ctx, "checkpoints/checkpoint")
		if err != nil || got != "checkpoints/ckpt-5" {
			t.Fatalf("ReadPointer = %q, %v, want checkpoints/ckpt-5", got, err)
		}
		// The pointer is the same file train.SaveCheckpoint writes.
		if raw, _ := s.Read(ctx, "checkpoints/checkpoint"); string(raw) != "ckpt-5\n" {
			t.Errorf("pointer content = %q, want %q", raw, "ckpt-5\n")
		}

		// A "directory" target: an export bundle is a prefix with objects.
		for _, f := range []string{"model", "transform", "metadata.json"} {
			if err := s.Write(ctx, "export/best/1700000000/"+f, []byte(f)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CommitPointer(ctx, "export/best/LATEST", "1700000000"); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ReadPointer(ctx, "export/best/LATEST"); err != nil || got != "export/best/1700000000" {
			t.Errorf("ReadPointer = %q, %v, want export/best/1700000000", got, err)
		}
		// A pointer at the root, and a target in a subdirectory.
		if err := s.CommitPointer(ctx, "CURRENT", "export/best/1700000000/model"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.ReadPointer(ctx, "CURRENT"); got != "export/best/1700000000/model" {
			t.Errorf("ReadPointer(CURRENT) = %q", got)
		}

		// A damaged pointer must not lead outside the Store.
		if err := s.Write(ctx, "evil", []byte("../../etc/passwd\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadPointer(ctx, "evil"); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ReadPointer of ../../etc/passwd: got %v, want ErrInvalidKey", err)
		}
		if err := s.CommitPointer(ctx, "p", "../x"); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("CommitPointer to ../x: got %v, want ErrInvalidKey", err)
		}
	})
}

// TestPointerAtomic has a writer publish checkpoints of 256 KiB the way the
// chief does (object, then pointer, then prune the old ones) while readers
// follow the pointer, and overwrite one fixed key while readers read it.
// Every read must return one complete version.
func TestPointerAtomic(t *testing.T) {
	const size = 256 << 10
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := 40
		if s.loc.scheme == "s3" || testing.Short() {
			steps = 10 // a network round trip per call; or -race -short
		}
		// payloads[step] is step's content: the step, then a pattern of it,
		// so a truncated or mixed read is caught.
		payloads := make([][]byte, steps+1)
		for step := range payloads {
			b := make([]byte, size)
			binary.LittleEndian.PutUint64(b, uint64(step))
			for i := 8; i < size; i += 8 {
				binary.LittleEndian.PutUint64(b[i:], uint64(step)*0x9e3779b97f4a7c15+uint64(i))
			}
			payloads[step] = b
		}
		check := func(what string, b []byte) error {
			if len(b) != size {
				return fmt.Errorf("%s: %d bytes, want %d", what, len(b), size)
			}
			step := binary.LittleEndian.Uint64(b)
			if step >= uint64(len(payloads)) || !bytes.Equal(b, payloads[step]) {
				return fmt.Errorf("%s: content is not one complete version", what)
			}
			return nil
		}
		// writeSlowly writes in 16 KiB pieces, yielding between them, so
		// readers run while an object is half written.
		writeSlowly := func(key string, b []byte) error {
			return s.WriteFunc(ctx, key, func(w io.Writer) error {
				for i := 0; i < len(b); i += 16 << 10 {
					if _, err := w.Write(b[i : i+16<<10]); err != nil {
						return err
					}
					runtime.Gosched()
				}
				return nil
			})
		}

		if err := writeSlowly("ckpt-0", payloads[0]); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitPointer(ctx, "checkpoint", "ckpt-0"); err != nil {
			t.Fatal(err)
		}
		if err := writeSlowly("model", payloads[0]); err != nil {
			t.Fatal(err)
		}

		var done atomic.Bool
		var reads atomic.Int64
		errs := make(chan error, 8)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for !done.Load() {
					target, err := s.ReadPointer(ctx, "checkpoint")
					if err != nil {
						errs <- err
						return
					}
					b, err := s.Read(ctx, target)
					if errors.Is(err, ErrNotExist) {
						continue // pruned after we read the pointer: read it again
					}
					if err != nil {
						errs <- err
						return
					}
					if err := check(target, b); err != nil {
						errs <- err
						return
					}
					b, err = s.Read(ctx, "model")
					if err == nil {
						err = check("model", b)
					}
					if err != nil {
						errs <- err
						return
					}
					reads.Add(1)
				}
			})
		}
		for step := 1; step <= steps; step++ {
			name := fmt.Sprintf("ckpt-%d", step)
			if err := writeSlowly(name, payloads[step]); err != nil {
				t.Fatal(err)
			}
			if err := s.CommitPointer(ctx, "checkpoint", name); err != nil {
				t.Fatal(err)
			}
			if step >= 2 {
				if err := s.Delete(ctx, fmt.Sprintf("ckpt-%d", step-2)); err != nil {
					t.Fatal(err)
				}
			}
			if err := writeSlowly("model", payloads[step]); err != nil {
				t.Fatal(err)
			}
		}
		done.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if reads.Load() == 0 {
			t.Error("the readers completed no read while the writer ran")
		}
		t.Logf("%d steps, %d complete reads", steps, reads.Load())
	})
}
