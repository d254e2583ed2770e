package jobs

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/workflows"
)

// hostile is text a job could put in a column name, a model name or an
// error: a terminal title, a cursor move and erase, a forged line, a
// bidi override, an 8-bit CSI and an invalid byte.
const hostile = "age\x1b]0;pwned\x07\x1b[2K\r\nstatus:   SUCCEEDED\u202e\u009b31m\xff"

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"census_1":      "census_1",
		"café ≥50K":     "café ≥50K",
		"a\tb\nc":       `a\tb\nc`,
		"\x1b[31mred":   `\x1b[31mred`,
		"x\u202ey":      `x\u202ey`,
		"\u009b":        `\u009b`,
		"bad \xff byte": `bad \xff byte`,
		"del\x7f":       `del\x7f`,
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// safe reports whether out holds no control character but the format's
// own newlines and tabs, and no bidi override.
func safe(out string) bool {
	for _, r := range out {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x202e || r == 0xfffd {
			return false
		}
	}
	return true
}

// TestDescribeAndListEscape prints a description and a list row whose
// untrusted fields hold terminal escapes: the output holds them escaped,
// one line per field, with no control character of their own.
func TestDescribeAndListEscape(t *testing.T) {
	start := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	d := &Description{JobID: "job_1", RunID: "run", Status: "FAILED", Start: start,
		Error:   "preprocess: column " + hostile + ": not a number",
		Pending: []PendingActivity{{Activity: "Preprocess", State: "SCHEDULED", Attempt: 2, LastFailure: hostile}},
		Result: &workflows.JobResult{Model: hostile, Export: "/x/" + hostile, Version: 2,
			Blessing: &workflows.BlessResult{Baseline: 1, Reasons: []string{"slice gender=" + hostile + ": accuracy regressed"}}}}
	var b bytes.Buffer
	d.WriteText(&b)
	out := b.String()
	if !safe(out) {
		t.Fatalf("describe output holds raw control characters: %q", out)
	}
	if !strings.Contains(out, `age\x1b]0;pwned\a\x1b[2K\r\nstatus:   SUCCEEDED\u202e\u009b31m\xff`) {
		t.Fatalf("describe output %q: want the hostile text escaped", out)
	}
	if !strings.Contains(out, "blessing: not blessed (baseline version 1); version 2 is not the default\n  - slice gender=age\\x1b]0;pwned") {
		t.Fatalf("describe output %q: want the blessing verdict, its reason escaped", out)
	}
	if n := strings.Count(out, "status:"); n != 1+strings.Count(out, `\nstatus:`) {
		t.Fatalf("describe output has a forged status line: %q", out)
	}

	b.Reset()
	if err := WriteRows(&b, []Row{{JobID: "job_1", Status: "RUNNING", Phase: hostile, Model: hostile, Start: start}}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !safe(out) || strings.Count(out, "\n") != 2 {
		t.Fatalf("list output %q: want 2 lines, no raw control characters", out)
	}
}
