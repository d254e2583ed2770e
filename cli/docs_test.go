package cli

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the user documentation: the README and every page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	if len(files) < 5 {
		t.Fatalf("found only %v: the docs moved?", files)
	}
	return files
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is GitHub's anchor of a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces as '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of a markdown file (outside
// code blocks).
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	code := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			code = !code
			continue
		}
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && !code && strings.HasPrefix(line, "#") {
			out[slug(h)] = true
		}
	}
	return out
}

// TestDocsLinks checks that every relative link of the README and docs/
// names a file that exists and, with a #fragment, a heading of it: a page
// moved or a section renamed breaks the test, not a reader's click.
func TestDocsLinks(t *testing.T) {
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s: link %q: %v", file, target, err)
					continue
				}
			}
			if frag != "" && !anchors(t, resolved)[frag] {
				t.Errorf("%s: link %q: no heading with anchor #%s in %s", file, target, frag, resolved)
			}
		}
	}
}

// docCommands returns the trainflow command lines in the code blocks of a
// markdown file, continuation lines joined, comments dropped, with the
// 1-based line each starts on.
func docCommands(t *testing.T, file string) (cmds []string, lines []int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	code, n, cur, start := false, 0, "", 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			code = !code
			continue
		}
		if !code {
			continue
		}
		if cur == "" {
			start = n
		}
		cur += " " + strings.TrimSpace(line)
		if strings.HasSuffix(cur, `\`) {
			cur = strings.TrimSuffix(cur, `\`)
			continue
		}
		full := strings.TrimSpace(cur)
		cur = ""
		for _, prefix := range []string{"go run ./cmd/trainflow ", "./trainflow ", "trainflow "} {
			if rest, ok := strings.CutPrefix(full, prefix); ok {
				cmds, lines = append(cmds, rest), append(lines, start)
				break
			}
		}
	}
	return cmds, lines
}

// inlineCode is a code span of prose: `…`, possibly across a line break.
var inlineCode = regexp.MustCompile("`([^`]+)`")

// docInlineCommands returns the trainflow command lines the prose of a
// markdown file quotes in code spans (`trainflow jobs describe JOB_ID`,
// possibly broken over two lines), with the 1-based line each starts on:
// a command a sentence tells the reader to run must exist as much as
// one in a code block.
func docInlineCommands(t *testing.T, file string) (cmds []string, lines []int) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Blank the code blocks (keeping their lines), so that only prose is
	// searched and line numbers stay right.
	src := strings.Split(string(b), "\n")
	code := false
	for i, line := range src {
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		if fence || code {
			src[i] = ""
		}
		if fence {
			code = !code
		}
	}
	text := strings.Join(src, "\n")
	for _, m := range inlineCode.FindAllStringSubmatchIndex(text, -1) {
		span := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
		rest, ok := strings.CutPrefix(span, "trainflow ")
		if !ok || strings.ContainsAny(rest, "…|<>") || strings.Contains(rest, "...") {
			continue // not a command line, or an outline of several
		}
		words := strings.Fields(rest)
		if slices.Contains(childCommands, words[0]) {
			continue // started by a worker with a request file, not by a reader
		}
		if last := words[len(words)-1]; strings.HasPrefix(last, "-") && !strings.Contains(last, "=") {
			// A flag named without its value (`trainflow replay --file`):
			// give it one, so that -h after it is not taken as the value.
			rest += " X"
		}
		cmds, lines = append(cmds, rest), append(lines, 1+strings.Count(text[:m[0]], "\n"))
	}
	return cmds, lines
}

// childCommands are the commands a worker starts (with a request file),
// which the docs name but no reader runs.
var childCommands = []string{"preprocess", "batch-predict", "train-child"}

// knownBrokenDocs are documented command lines that do not parse, in
// pages this test's owners may not edit yet, by file and line: each is
// a bug to fix in its page (then removed here), never a new entry to add
// instead of fixing a page.
var knownBrokenDocs = map[string]string{}

// shellWords splits a command line as a shell would for the simple
// quoting the docs use, dropping a trailing comment.
func shellWords(s string) []string {
	var words []string
	var cur bytes.Buffer
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '#' && !in:
			return words
		case unicode.IsSpace(r):
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestDocsCommandLines runs every trainflow command line shown in the
// README and docs/ (in code blocks, and quoted in the prose's code spans)
// with -h appended: the command must exist and accept
// every flag the line gives (an unknown flag or command fails before -h
// is reached). Optional parts in [brackets] are checked as if given;
// lines offering alternatives with " | " are skipped.
func TestDocsCommandLines(t *testing.T) {
	total := 0
	for _, file := range docFiles(t) {
		cmds, lines := docCommands(t, file)
		inline, inlineLines := docInlineCommands(t, file)
		cmds, lines = append(cmds, inline...), append(lines, inlineLines...)
		for i, cmd := range cmds {
			if strings.Contains(cmd, " | ") {
				continue
			}
			words := shellWords(strings.NewReplacer("[", " ", "]", " ").Replace(cmd))
			if len(words) == 0 || knownBrokenDocs[file] == cmd {
				continue
			}
			total++
			var stdout, stderr bytes.Buffer
			args := append(words, "-h")
			if i := slices.Index(words, "--"); i >= 0 { // -- ends the flags: -h goes before it
				args = append(slices.Clone(words[:i]), append([]string{"-h"}, words[i:]...)...)
			}
			if code := run(args, &stdout, &stderr); code != exitOK {
				msg := strings.Split(strings.TrimSpace(stderr.String()), "\n")
				t.Errorf("%s:%d: trainflow %s: exit %d: %s", file, lines[i], strings.Join(words, " "), code, msg[len(msg)-1])
			}
		}
	}
	if total < 10 {
		t.Fatalf("checked only %d command lines: the code blocks changed form?", total)
	}
}
