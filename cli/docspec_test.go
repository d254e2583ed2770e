package cli

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/jobspec"
)

// notSpecMarker, on the line before a ```json block, says the block is
// JSON that is not a spec (a record, a response) although it has a
// "job_id"; the rest of the line says what it is.
const notSpecMarker = "<!-- not a spec"

// docExample is one JSON example of a doc: its file and line, its text,
// and whether it is a fragment (the members of a spec's top-level object,
// as `"data": {...}`).
type docExample struct {
	file     string
	line     int
	text     string
	fragment bool
}

// inlineJSON matches an inline code span holding a JSON object; a span
// may run over several lines, as markdown allows.
var inlineJSON = regexp.MustCompile("`(\\{[^`]*\\})`")

// cliInput matches the JSON a Temporal CLI command line passes as
// --input, in single quotes.
var cliInput = regexp.MustCompile(`--input '(\{[^']*\})'`)

// docSpecExamples returns the examples of file that the rule of
// TestDocsSpecsDecode makes specs:
//
//   - a ```json block that is a JSON object with a top-level "job_id",
//     unless the line before it starts with notSpecMarker;
//   - a ```json block that is not a JSON value at all: a fragment of a
//     spec, such as `"data": {...}` (checked inside {"job_id": ...});
//   - an inline code span holding an object with a "job_id" key (the
//     Temporal UI's Input box examples), which must then be JSON;
//   - the quoted argument of a Temporal CLI --input '{...}', anywhere.
//
// Other JSON (responses, records without "job_id", shapes with "…" in
// place of values) is not a spec and is not returned.
func docSpecExamples(t *testing.T, file string) []docExample {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []docExample
	prose := make([]string, len(lines)) // lines outside code blocks, others blank
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			prose[i] = lines[i]
			continue
		}
		start := i
		for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```"); i++ {
		}
		if strings.TrimPrefix(fence, "```") != "json" {
			continue
		}
		body := strings.Join(lines[start+1:min(i, len(lines))], "\n")
		ex := docExample{file: file, line: start + 2, text: body}
		var obj map[string]json.RawMessage
		switch {
		case start > 0 && strings.HasPrefix(strings.TrimSpace(lines[start-1]), notSpecMarker):
		case json.Unmarshal([]byte(body), &obj) == nil:
			if _, ok := obj["job_id"]; ok {
				out = append(out, ex)
			}
		case !json.Valid([]byte(body)):
			ex.fragment = true
			out = append(out, ex)
		}
	}
	text := strings.Join(prose, "\n")
	for _, m := range inlineJSON.FindAllStringSubmatchIndex(text, -1) {
		span := text[m[2]:m[3]]
		if strings.Contains(span, `"job_id"`) {
			out = append(out, docExample{file: file, line: strings.Count(text[:m[2]], "\n") + 1, text: span})
		}
	}
	for _, m := range cliInput.FindAllStringSubmatchIndex(string(b), -1) {
		out = append(out, docExample{file: file, line: strings.Count(string(b[:m[2]]), "\n") + 1, text: string(b[m[2]:m[3]])})
	}
	return out
}

// TestDocsSpecsDecode decodes every spec example of the README and docs/
// (see docSpecExamples for which JSON is one) with jobspec's strict
// decoder and validates it with its defaults, as a worker would: a
// renamed field or a value a release stopped taking breaks the test, not
// a reader's first job. An example with "input_paths" or "output_path"
// is a batch prediction spec (jobspec.PredictionSpec), any other a job
// spec (jobspec.JobSpec, tuning included).
func TestDocsSpecsDecode(t *testing.T) {
	var n, fragments, predictions int
	for _, file := range docFiles(t) {
		for _, ex := range docSpecExamples(t, file) {
			n++
			text := ex.text
			if ex.fragment {
				fragments++
				text = `{"job_id": "docs_fragment", ` + text + "}"
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal([]byte(text), &keys); err != nil {
				t.Errorf("%s:%d: a spec example that is not a JSON object: %v\n%s", ex.file, ex.line, err, ex.text)
				continue
			}
			_, in := keys["input_paths"]
			_, out := keys["output_path"]
			var err error
			if in || out {
				predictions++
				var p jobspec.PredictionSpec
				if err = jobspec.DecodeStrict([]byte(text), &p); err == nil {
					err = p.WithDefaults().Validate()
				}
			} else {
				var s jobspec.JobSpec
				if s, err = jobspec.DecodeSpec([]byte(text)); err == nil {
					d := s.WithDefaults()
					err = d.Validate()
				}
			}
			if err != nil {
				t.Errorf("%s:%d: %v\n%s", ex.file, ex.line, err, ex.text)
			}
		}
	}
	t.Logf("checked %d spec examples (%d fragments, %d prediction specs)", n, fragments, predictions)
	// The rule must keep finding the examples it was written for: the
	// Input box and CLI examples, a tuning spec, a prediction spec, a
	// fragment.
	if n < 8 || fragments == 0 || predictions == 0 {
		t.Fatalf("checked %d spec examples (%d fragments, %d prediction specs): the rule no longer finds the docs' examples", n, fragments, predictions)
	}
}
