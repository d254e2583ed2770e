package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

func TestReadWrite(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, s *Store) {
		for _, tc := range []struct {
			key  string
			data []byte
		}{
			{"a", []byte("first")},
			{"a", []byte("second, longer than the first")}, // overwrite
			{"empty", []byte{}},
			{"dir/sub/bin", []byte{0, 1, 2, 0xff, '\n'}},
			{"with space/ünïcode.json", []byte(`{"x":1}`)},
		} {
			if err := s.Write(ctx, tc.key, tc.data); err != nil {
				t.Fatalf("Write(%q): %v", tc.key, err)
			}
			got, err := s.Read(ctx, tc.key)
			if err != nil {
				t.Fatalf("Read(%q): %v", tc.key, err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Errorf("Read(%q) = %q, want %q", tc.key, got, tc.data)
			}
			ok, err := s.Exists(ctx, tc.key)
			if err != nil || !ok {
				t.Errorf("Exists(%q) = %v, %v, want true, nil", tc.key, ok, err)
			}
		}
		r, err := s.NewReader(ctx, "dir/sub/bin")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, []byte{0, 1, 2, 0xff, '\n'}) {
			t.Errorf("NewReader: got %q, %v", got, err)
		}
		// A prefix of other keys is not an object.
		if ok, err := s.Exists(ctx, "dir"); ok || err != nil {
			t.Errorf("Exists(dir) = %v, %v, want false, nil", ok, err)
		}
		if err := s.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := s.Exists(ctx, "a"); ok {
			t.Error("a exists after Delete")
		}
	})
}

func TestMissingKey(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, s *Store) {
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, ErrNotExist) || !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: got %v, want ErrNotExist and fs.ErrNotExist", op, err)
			}
			if err != nil && !strings.Contains(err.Error(), s.location("no/such")) {
				t.Errorf("%s: error %q does not name %s", op, err, s.location("no/such"))
			}
		}
		_, err := s.Read(ctx, "no/such")
		check("Read", err)
		_, err = s.NewReader(ctx, "no/such")
		check("NewReader", err)
		_, err = s.ReadPointer(ctx, "no/such")
		check("ReadPointer", err)
		if ok, err := s.Exists(ctx, "no/such"); ok || err != nil {
			t.Errorf("Exists = %v, %v, want false, nil", ok, err)
		}
		if err := s.Delete(ctx, "no/such"); err != nil {
			t.Errorf("Delete of a missing key: %v, want nil", err)
		}
		if err := s.DeleteAll(ctx, "no/"); err != nil {
			t.Errorf("DeleteAll of a missing prefix: %v, want nil", err)
		}
	})
}

func TestInvalidKey(t *testing.T) {
	ctx := context.Background()
	keys := []string{"", "/a", "a/", "a//b", ".", "..", "../a", "a/../b", "a/./b", "a\x00b", "a\nb", "x.1f3a.tmp"}
	forEachBackend(t, func(t *testing.T, s *Store) {
		for _, k := range keys {
			ops := map[string]error{}
			_, ops["Read"] = s.Read(ctx, k)
			_, ops["NewReader"] = s.NewReader(ctx, k)
			ops["Write"] = s.Write(ctx, k, []byte("x"))
			_, ops["Exists"] = s.Exists(ctx, k)
			ops["Delete"] = s.Delete(ctx, k)
			ops["CommitPointer"] = s.CommitPointer(ctx, k, "x")
			ops["CommitPointer target"] = s.CommitPointer(ctx, "p", k)
			for op, err := range ops {
				if !errors.Is(err, ErrInvalidKey) {
					t.Errorf("%s(%q): got %v, want ErrInvalidKey", op, k, err)
				}
			}
		}
		for _, p := range []string{"/a", "a//", "../", "a/../"} {
			if _, err := s.List(ctx, p); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("List(%q): got %v, want ErrInvalidKey", p, err)
			}
		}
		keys, err := s.List(ctx, "")
		if err != nil || len(keys) != 0 {
			t.Errorf("after invalid writes List = %q, %v, want nothing", keys, err)
		}
	})
}

func TestList(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, s *Store) {
		all := []string{
			"checkpoints/checkpoint", "checkpoints/ckpt-10", "checkpoints/ckpt-2",
			"events.jsonl", "export/best/1/model", "export/best/1/transform", "export/best_old/x",
		}
		for _, k := range all {
			if err := s.Write(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", all},
			{"checkpoints/", all[:3]},
			{"checkpoints", all[:3]},
			{"checkpoints/ckpt-", all[1:3]},
			{"export/best/", all[4:6]},
			{"export/best", all[4:7]}, // a partial segment matches best_old too
			{"events.jsonl", all[3:4]},
			{"nothing/", nil},
		} {
			got, err := s.List(ctx, tc.prefix)
			if err != nil {
				t.Fatalf("List(%q): %v", tc.prefix, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		}
		if err := s.DeleteAll(ctx, "export/best/"); err != nil {
			t.Fatal(err)
		}
		got, _ := s.List(ctx, "export/")
		if want := []string{"export/best_old/x"}; !slices.Equal(got, want) {
			t.Errorf("after DeleteAll(export/best/) List(export/) = %q, want %q", got, want)
		}
	})
}

func TestSub(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, s *Store) {
		job := s.Sub("jobs/census_1/") // trailing slash is allowed
		ckpt := job.Sub("checkpoints")
		if err := ckpt.Write(ctx, "ckpt-1", []byte("c1")); err != nil {
			t.Fatal(err)
		}
		if err := s.Write(ctx, "jobs/census_10/events.jsonl", []byte("other job")); err != nil {
			t.Fatal(err)
		}
		got, err := s.Read(ctx, "jobs/census_1/checkpoints/ckpt-1")
		if err != nil || string(got) != "c1" {
			t.Errorf("parent Read = %q, %v, want c1", got, err)
		}
		keys, _ := job.List(ctx, "")
		if want := []string{"checkpoints/ckpt-1"}; !slices.Equal(keys, want) {
			t.Errorf("job.List = %q, want %q (census_10 must not leak in)", keys, want)
		}
		if s.Sub("").URI() != s.URI() {
			t.Errorf("Sub(\"\").URI() = %s, want %s", s.Sub("").URI(), s.URI())
		}
		// The URI of a Sub opens the same place, in this or another process.
		re := mustOpen(t, ckpt.URI())
		if got, err := re.Read(ctx, "ckpt-1"); err != nil || string(got) != "c1" {
			t.Errorf("Open(%s).Read = %q, %v, want c1", ckpt.URI(), got, err)
		}
		if err := ckpt.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Read(ctx, "jobs/census_1/checkpoints/ckpt-1"); err != nil {
			t.Errorf("parent unusable after closing a Sub: %v", err)
		}
		bad := s.Sub("../escape")
		if err := bad.Write(ctx, "x", nil); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Write on Sub(../escape): got %v, want ErrInvalidKey", err)
		}
		if _, err := bad.Sub("ok").List(ctx, ""); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("List on Sub(../escape).Sub(ok): got %v, want ErrInvalidKey", err)
		}
	})
}

// errFill is what the failing fill functions below return.
var errFill = errors.New("fill failed")

func TestWriteFuncAbort(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, s *Store) {
		half := func(w io.Writer) error {
			w.Write(bytes.Repeat([]byte("partial "), 800_000)) // past S3's 5 MiB part size
			return errFill
		}
		if err := s.WriteFunc(ctx, "new", half); !errors.Is(err, errFill) {
			t.Fatalf("WriteFunc: got %v, want errFill", err)
		}
		if ok, err := s.Exists(ctx, "new"); ok || err != nil {
			t.Errorf("after a failed first write Exists = %v, %v, want false, nil", ok, err)
		}
		if err := s.Write(ctx, "old", []byte("complete")); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteFunc(ctx, "old", half); !errors.Is(err, errFill) {
			t.Fatalf("WriteFunc: got %v, want errFill", err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic in fill did not reach the caller")
				}
			}()
			s.WriteFunc(ctx, "old", func(w io.Writer) error {
				w.Write([]byte("partial"))
				panic("boom")
			})
		}()
		cctx, cancel := context.WithCancel(ctx)
		err := s.WriteFunc(cctx, "old", func(w io.Writer) error {
			w.Write([]byte("partial"))
			cancel()
			return nil
		})
		if err == nil {
			t.Error("WriteFunc with a context canceled during fill succeeded")
		}
		if got, err := s.Read(ctx, "old"); err != nil || string(got) != "complete" {
			t.Errorf("after aborted overwrites Read = %.20q, %v, want complete", got, err)
		}
		if keys, _ := s.List(ctx, ""); !slices.Equal(keys, []string{"old"}) {
			t.Errorf("after aborted writes List = %q, want [old]", keys)
		}
	})
}
