package console

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// TestLongJobChartMarks: the job page of a 400k-step job with a
// checkpoint every 500 steps (800 checkpoints) draws at most
// maxAxisMarks checkpoint marks per chart, short ticks on the x axis
// rather than lines across the curves, says how many there are and how
// far apart, and draws every curve after (over) them; a short job keeps
// its few checkpoints as lines across the plot, still under the curves.
func TestLongJobChartMarks(t *testing.T) {
	root := t.TempDir()
	long := synthJobs[0] // 400k steps, a checkpoint every 500
	long.write(t, filepath.Join(root, long.ID))
	short := synthJob{ID: "short", Steps: 5000, SummaryEvery: 100, CkptEvery: 500, EvalEvery: 500}
	short.write(t, filepath.Join(root, short.ID))
	c, err := New(Options{Roots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	mark := "stroke:#8C94A3" // checkpointColor
	curve := "stroke:" + colorHex(palette[0].R, palette[0].G, palette[0].B)
	for _, tc := range []struct {
		job      synthJob
		maxMarks int
		note     string
	}{
		{long, 40, "800 checkpoints, every 500 steps: 40 marked on the x axis"},
		{short, 10, ""},
	} {
		rec, b := renderJobPage(t, c, echo.New(), tc.job.ID, filepath.Join(root, tc.job.ID))
		page := rec.Body.String()
		if tc.note != "" && !strings.Contains(page, `<span class="marks-note">`+tc.note+`</span>`) {
			t.Errorf("%s: the page does not say %q", tc.job.ID, tc.note)
		}
		if tc.note == "" && strings.Contains(page, "marks-note") {
			t.Errorf("%s: a note on the marks of a short job", tc.job.ID)
		}
		if len(b.Charts) != 2 {
			t.Fatalf("%s: %d charts, want 2", tc.job.ID, len(b.Charts))
		}
		for _, ch := range b.Charts {
			svg := string(ch.SVG)
			paths := strings.Split(svg, "<path")[1:]
			var marks []int
			firstCurve := -1
			for i, p := range paths {
				switch {
				case strings.Contains(p, mark):
					marks = append(marks, i)
				case strings.Contains(p, curve) && firstCurve < 0:
					firstCurve = i
				}
			}
			// The legend's thumbnail is one mark more, drawn last.
			if n := len(marks) - 1; n > tc.maxMarks || n < 2 {
				t.Errorf("%s %q: %d checkpoint marks, want 2 to %d", tc.job.ID, ch.Title, n, tc.maxMarks)
			}
			if firstCurve < 0 || len(marks) < 2 || marks[len(marks)-2] > firstCurve {
				t.Errorf("%s %q: the first curve path is #%d, the marks are #%v: want every mark under (before) the curves", tc.job.ID, ch.Title, firstCurve, marks)
			}
		}
	}
}

func colorHex(r, g, b uint8) string { return fmt.Sprintf("#%02X%02X%02X", r, g, b) }
