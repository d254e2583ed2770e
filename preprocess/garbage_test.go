package preprocess

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAllGarbageWritesBadRecords (issue #43): a training file of which
// no row is valid fails with the counts by reason in the error, and
// every rejected row is in bad_records/ with its file, line and reason,
// as docs/job-spec.md says, even though no shard is written.
func TestAllGarbageWritesBadRecords(t *testing.T) {
	r := writeCensus(t, 50)
	var b strings.Builder
	for i := range 30 {
		if i%3 == 0 {
			b.WriteString("old, Private, 1, HS-grad, 9, Divorced, Sales, Unmarried, White, Male, 0, 0, 40, Cuba, <=50K\n")
		} else {
			b.WriteString("garbage, garbage\n")
		}
	}
	if err := os.WriteFile(r.Train[0], []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := RunLocal(r)
	if err == nil || !errors.Is(err, ErrTransform) {
		t.Fatalf("error %v, want an invalid-transform error", err)
	}
	for _, want := range []string{"no valid training rows", "all 30 rows rejected", ReasonColumnCount + " 20", ReasonBadNumber + " 10", BadRecordsDir + "/"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	files, _ := filepath.Glob(filepath.Join(r.OutDir, BadRecordsDir, "*.jsonl"))
	lines := map[int64]BadRecord{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var rec BadRecord
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if rec.File != r.Train[0] || rec.Reason == "" {
				t.Errorf("bad record %+v: want file %s and a reason", rec, r.Train[0])
			}
			lines[rec.Line] = rec
		}
		fh.Close()
	}
	if len(lines) != 30 {
		t.Fatalf("%d bad records in %v, want one for each of the 30 lines", len(lines), files)
	}
	if rec := lines[1]; rec.Reason != ReasonBadNumber || rec.Column == "" {
		t.Errorf("line 1: %+v, want %s naming its column", rec, ReasonBadNumber)
	}
	if rec := lines[2]; rec.Reason != ReasonColumnCount {
		t.Errorf("line 2: %+v, want %s", rec, ReasonColumnCount)
	}
}
