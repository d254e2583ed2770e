package preprocess

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shardBytes reads every shard of a manifest.
func shardBytes(t *testing.T, dir string, m *Manifest) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, s := range append(m.Train, m.Eval...) {
		b, err := os.ReadFile(filepath.Join(dir, DataDir, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		out[s.Name] = b
	}
	return out
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInputFormats checks that the same rows as headerless CSV, as CSV with
// a reordered header and an extra column, and as JSON Lines give the same
// shards.
func TestInputFormats(t *testing.T) {
	s := CensusWideSchema()
	dir := t.TempDir()
	train, eval := censusLines(t, 400, 11, false), censusLines(t, 200, 12, true)
	type variant struct {
		name   string
		schema func(*Schema)
		line   func(fields []string) string
		header string
	}
	names := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		names[i] = c.Name
	}
	variants := []variant{
		{name: "csv", schema: func(*Schema) {}, line: func(f []string) string { return strings.Join(f, ",") }},
		{name: "header", schema: func(s *Schema) { s.Header = true },
			header: "extra," + strings.Join(reverse(names), ", "),
			line:   func(f []string) string { return "zzz," + strings.Join(reverse(f), ",") }},
		{name: "jsonl", schema: func(s *Schema) { s.Format = FormatJSONL }, line: func(f []string) string {
			obj := map[string]any{"unused_key": true}
			for i, c := range s.Columns {
				v := strings.TrimSpace(f[i])
				switch {
				case v == "":
				case c.Type == TypeNumber:
					obj[c.Name] = json.Number(v)
				default:
					obj[c.Name] = v
				}
			}
			return string(must(json.Marshal(obj)))
		}},
	}
	var first map[string][]byte
	var firstHash string
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := &Request{Schema: s, OutDir: filepath.Join(dir, v.name), TrainShards: 1, EvalShards: 1, Seed: 5, MaxBadFraction: 0.01}
			v.schema(&r.Schema)
			for _, sp := range []struct {
				lines []string
				files *[]string
			}{{train, &r.Train}, {eval, &r.Eval}} {
				var out []string
				if v.header != "" {
					out = append(out, v.header)
				}
				for _, l := range sp.lines {
					out = append(out, v.line(strings.Split(l, ",")))
				}
				path := filepath.Join(dir, fmt.Sprintf("%s-%d", v.name, len(sp.lines)))
				writeLines(t, path, out)
				*sp.files = []string{path}
			}
			m, err := RunLocal(r)
			if err != nil {
				t.Fatal(err)
			}
			if m.TrainRows != 400 || m.EvalRows != 200 || len(m.Bad) != 0 {
				t.Fatalf("rows %d/%d bad %v, want 400/200 and none", m.TrainRows, m.EvalRows, m.Bad)
			}
			tr, _, err := ReadTransform(r.OutDir)
			if err != nil {
				t.Fatal(err)
			}
			// The schema differs (format, header), the fitted features must not.
			h := string(must(json.Marshal(tr.Features)))
			got := shardBytes(t, r.OutDir, m)
			if first == nil {
				first, firstHash = got, h
				return
			}
			if h != firstHash {
				t.Errorf("features differ from csv")
			}
			for name, b := range got {
				if !bytes.Equal(b, first[name]) {
					t.Errorf("shard %s differs from csv", name)
				}
			}
		})
	}
}

func reverse(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func TestParseJSONLine(t *testing.T) {
	s := smallSchema()
	tests := []struct {
		line   string
		want   []Value
		reason string
	}{
		{line: `{"age":39,"color":"red","hours":null,"label":"yes","extra":1}`, want: []Value{{Num: 39}, {Str: "red"}, {Num: 40}, {}, {Str: "yes"}}},
		{line: `{"age":39,"color":"red","label":"no","id":"x"}`, reason: ReasonWrongType},
		{line: `{"age":"39","color":"red","label":"yes"}`, reason: ReasonWrongType},
		{line: `{"age":39,"color":"red"}`, reason: ReasonEmptyLabel},
		{line: `{"age":39,"color":"red","label":""}`, reason: ReasonEmptyLabel},
		{line: `{"color":"red","label":"no"}`, reason: ReasonMissing},
		{line: `[1,2]`, reason: ReasonBadJSON},
		{line: `{"age":39,`, reason: ReasonBadJSON},
	}
	for _, tt := range tests {
		row := make([]Value, len(s.Columns))
		err := s.ParseJSONLine(row, tt.line)
		var re *RowError
		switch {
		case tt.reason != "" && (!errors.As(err, &re) || re.Reason != tt.reason):
			t.Errorf("ParseJSONLine(%s) = %v, want reason %s", tt.line, err, tt.reason)
		case tt.reason == "" && err != nil:
			t.Errorf("ParseJSONLine(%s): %v", tt.line, err)
		case tt.reason == "" && fmt.Sprint(row) != fmt.Sprint(tt.want):
			t.Errorf("ParseJSONLine(%s) = %v, want %v", tt.line, row, tt.want)
		}
	}
}

func TestRequestCheckHeader(t *testing.T) {
	dir := t.TempDir()
	s := smallSchema()
	s.Header = true
	ok, missing := filepath.Join(dir, "ok.csv"), filepath.Join(dir, "missing.csv")
	writeLines(t, ok, []string{"label,id,hours,color,age", "yes,1,2,red,30"})
	writeLines(t, missing, []string{"label,id,hours,age,s3cr3t", "yes,1,2,30,x"})
	r := &Request{Schema: s, Train: []string{ok}, Eval: []string{ok}, OutDir: dir, TrainShards: 1, EvalShards: 1}
	if err := r.Check(); err != nil {
		t.Fatalf("Check() = %v", err)
	}
	r.Eval = []string{missing}
	if err := r.Check(); !errors.Is(err, ErrRequest) || !strings.Contains(err.Error(), `"color"`) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Check() = %v, want ErrRequest naming color and the file", err)
	}
	// Neither Check nor the pipeline's parser quotes the header line: the
	// file may be one no job should read.
	for _, err := range []error{r.Check(), func() error { _, err := s.parser(missing); return err }()} {
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("header error %v quotes the file's first line", err)
		}
	}
}

// TestBadRecordsQuarantine puts bad rows at known lines of a file cut into
// several blocks and checks counts, line numbers and the quarantine files.
func TestBadRecordsQuarantine(t *testing.T) {
	r := writeCensus(t, 300)
	lines := append([]string{"|1x3 comment"}, censusLines(t, 300, 1, false)...)
	bad := map[int]string{ // 1-based line number → reason
		2:   ReasonColumnCount,
		50:  ReasonBadNumber,
		51:  ReasonEmptyLabel,
		177: ReasonUnknownLabel,
		299: ReasonMissing,
	}
	for n, reason := range bad {
		f := strings.Split(lines[n-1], ",")
		switch reason {
		case ReasonColumnCount:
			f = f[:3]
		case ReasonBadNumber:
			f[0] = "forty"
		case ReasonEmptyLabel:
			f[14] = " "
		case ReasonUnknownLabel:
			f[14] = " >100K"
		case ReasonMissing:
			f[4] = ""
		}
		lines[n-1] = strings.Join(f, ",")
	}
	r.Schema.CommentPrefix = "|"
	writeLines(t, r.Train[0], lines)
	r.MaxBadFraction = 0.05
	m, err := RunLocal(r)
	if err != nil {
		t.Fatal(err)
	}
	if m.TrainRows != int64(300-len(bad)) || m.Failure != "" {
		t.Fatalf("train rows %d failure %q, want %d and none", m.TrainRows, m.Failure, 300-len(bad))
	}
	for _, reason := range bad {
		if m.Bad[reason] != 1 {
			t.Errorf("bad[%s] = %d, want 1 (all %v)", reason, m.Bad[reason], m.Bad)
		}
	}
	got := map[int]BadRecord{}
	files := 0
	for _, s := range m.Train {
		if s.BadRecords == "" {
			if len(s.Bad) != 0 {
				t.Errorf("shard %s has bad rows but no quarantine file", s.Name)
			}
			continue
		}
		files++
		f, err := os.Open(filepath.Join(r.OutDir, s.BadRecords))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var rec BadRecord
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatal(err)
			}
			got[int(rec.Line)] = rec
		}
		f.Close()
	}
	if files < 2 {
		t.Errorf("%d quarantine files, want bad rows spread over several blocks", files)
	}
	for n, reason := range bad {
		rec, ok := got[n]
		if !ok {
			t.Errorf("line %d not quarantined (got lines %v)", n, keys(got))
			continue
		}
		if rec.Reason != reason || rec.File != r.Train[0] || rec.Record != lines[n-1] {
			t.Errorf("line %d: got %+v, want reason %s and the raw line %q", n, rec, reason, lines[n-1])
		}
	}
	if len(got) != len(bad) {
		t.Errorf("%d quarantined rows, want %d", len(got), len(bad))
	}
	entries, _ := os.ReadDir(filepath.Join(r.OutDir, BadRecordsDir))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}

	// A clean rerun removes the earlier quarantine files.
	writeLines(t, r.Train[0], censusLines(t, 300, 1, false))
	if _, err := RunLocal(r); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(r.OutDir, BadRecordsDir)); len(entries) != 0 {
		t.Errorf("stale quarantine files after a clean run: %v", entries)
	}
}

func keys[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}
