package jobs

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/workflows"
)

// Follow waits for run, showing its progress every second: a redrawn bar
// on a terminal, a line per change otherwise (and nothing when quiet).
func Follow(ctx context.Context, cl client.Client, run client.WorkflowRun, spec jobspec.JobSpec, w io.Writer, show bool) (workflows.JobResult, error) {
	done := make(chan error, 1)
	var res workflows.JobResult
	go func() { done <- run.Get(ctx, &res) }()
	tty := show && isTerminal(w)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last string
	for {
		select {
		case err := <-done:
			if tty {
				fmt.Fprintln(w)
			}
			return res, err
		case <-tick.C:
			if !show {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			v, err := cl.QueryWorkflow(qctx, run.GetID(), run.GetRunID(), workflows.ProgressQuery)
			cancel()
			if err != nil {
				continue
			}
			var p workflows.Progress
			if v.Get(&p) != nil {
				continue
			}
			line := ProgressLine(p, spec.Model.BatchSize)
			switch { // the phase and metric are the workflow's answer: cleaned (printf)
			case tty:
				printf(w, "\r%-100s", line)
			case line != last:
				printf(w, "%s\n", line)
			}
			last = line
		}
	}
}

// ProgressLine renders phase, a step bar, loss, examples/s and the ETA.
func ProgressLine(p workflows.Progress, batch int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-13s", p.Phase)
	if t := p.Tuning; t != nil {
		done, running := 0, 0
		for _, tr := range t.Trials {
			if tr.State == workflows.TrialRunning {
				running++
			} else {
				done++
			}
		}
		fmt.Fprintf(&b, " trials %d done, %d running of %d", done, running, t.MaxTrials)
		if t.BestObjective != nil {
			fmt.Fprintf(&b, "; best %s %.4f (trial %d)", t.Metric, *t.BestObjective, t.BestTrial)
		}
		return b.String()
	}
	if p.MaxSteps > 0 {
		const width = 30
		frac := min(1, float64(p.GlobalStep)/float64(p.MaxSteps))
		n := int(frac * width)
		fmt.Fprintf(&b, " [%s%s] %d/%d", strings.Repeat("#", n), strings.Repeat(".", width-n), p.GlobalStep, p.MaxSteps)
	}
	if p.Loss != 0 {
		fmt.Fprintf(&b, " loss %.4f", p.Loss)
	}
	if p.ExamplesPerSec > 0 {
		fmt.Fprintf(&b, " %.0f ex/s", p.ExamplesPerSec)
		if batch > 0 && p.GlobalStep < p.MaxSteps && p.Phase == workflows.PhaseTraining {
			eta := time.Duration(float64(p.MaxSteps-p.GlobalStep) * float64(batch) / p.ExamplesPerSec * float64(time.Second))
			fmt.Fprintf(&b, " ETA %s", eta.Round(time.Second))
		}
	}
	return b.String()
}

// isTerminal reports whether w is a character device.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
