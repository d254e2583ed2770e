package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/trainflow/trainflow/workflows"
)

// writeTrials prints a tuning job's trials table for `jobs describe`.
func writeTrials(w io.Writer, t *workflows.TuningReport) {
	fmt.Fprintf(w, "tuning:   %s %s, %s, %d of %d trials, %d at once\n", t.Goal, t.Metric, t.Algorithm, len(t.Trials), t.MaxTrials, t.Parallel)
	if t.BestObjective != nil {
		fmt.Fprintf(w, "best:     trial %d, %s %.4f\n", t.BestTrial, t.Metric, *t.BestObjective)
	}
	if len(t.Resumed) > 0 {
		fmt.Fprintf(w, "resumed:  %d trials of an earlier job\n", len(t.Resumed))
	}
	for _, d := range t.Data {
		users := 0
		for _, tr := range t.Trials {
			if tr.Data == d.Number {
				users++
			}
		}
		line := fmt.Sprintf("data:     %s %s, shared by %d trials", d.ID, d.State, users)
		if d.Result != nil {
			line += fmt.Sprintf(", transform %.12s, %d train rows", d.Result.TransformHash, d.Result.TrainRows)
		}
		if d.Error != "" {
			line += ": " + d.Error
		}
		fmt.Fprintln(w, line)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TRIAL\tSTATE\t%s\tSTEP\tSTOPPED EARLY\tPARAMS\n", strings.ToUpper(t.Metric))
	for _, tr := range t.Trials {
		obj := "-"
		if tr.Objective != nil {
			obj = fmt.Sprintf("%.4f", *tr.Objective)
		}
		var ps []string
		for _, name := range t.ParamNames {
			ps = append(ps, name+"="+tr.Params[name])
		}
		mark := ""
		if tr.Number == t.BestTrial {
			mark = " *"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%d\t%v\t%s\n", tr.ID, mark, tr.State, obj, tr.Step, tr.StoppedEarly, strings.Join(ps, " "))
	}
	tw.Flush()
}
