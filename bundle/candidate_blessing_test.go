package bundle

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/internal/storage"
)

// TestCandidateBlessing: the Bless step's record round-trips through the
// candidate's directory without changing the bundle (its ID, what Read
// loads); a candidate without one is ErrNotFound, an oversized or bad one
// ErrBundle; CheckCandidate accepts a record of this bundle and model
// only.
func TestCandidateBlessing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/v1/bundle")); err != nil {
		t.Fatal(err)
	}
	b, err := ReadDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := ReadCandidateBlessing(ctx, st); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no record: %v, want ErrNotFound", err)
	}
	bl := &Blessing{Model: "census", CandidateID: b.ID(), Blessed: true, JobID: "census_1", Reasons: []string{}}
	if err := WriteCandidateBlessing(ctx, st, bl); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCandidateBlessing(ctx, st)
	if err != nil || got.CandidateID != b.ID() || !got.Blessed || got.FormatVersion != BlessingFormat {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if err := got.CheckCandidate(b, "census"); err != nil {
		t.Fatalf("CheckCandidate of its own bundle: %v", err)
	}
	if again, err := ReadDir(dir, nil); err != nil || again.ID() != b.ID() || len(again.Files) != len(b.Files) {
		t.Fatalf("the bundle with its record: %v, ID %s (was %s)", err, again.ID(), b.ID())
	}
	for _, c := range []struct {
		bl   Blessing
		want string
	}{
		{Blessing{Model: "census", CandidateID: strings.Repeat("0", 64)}, "judged bundle"},
		{Blessing{Model: "other", CandidateID: b.ID()}, `model "other"`},
	} {
		if err := c.bl.CheckCandidate(b, "census"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckCandidate(%+v) = %v, want %q", c.bl, err, c.want)
		}
	}
	for name, raw := range map[string][]byte{
		"oversized": bytes.Repeat([]byte(" "), maxBlessingBytes+1),
		"not json":  []byte("{"),
	} {
		if err := st.Write(ctx, BlessingFile, raw); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadCandidateBlessing(ctx, st); !errors.Is(err, ErrBundle) {
			t.Errorf("%s record: %v, want ErrBundle", name, err)
		}
	}
}
