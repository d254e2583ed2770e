package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/workflows"
)

// censusDataDirs are where UCI Adult is looked for: beside the main
// checkout (censusDir) or beside a worktree under /work/wt.
var censusDataDirs = []string{censusDir, "../../../shared/datasets/census"}

// TestBlessingOnCensus runs blessed census jobs on the dev stack (real
// Temporal, worker, Beam child, prediction server): the first version
// has no baseline and is blessed; a candidate trained badly (20 steps at
// a tiny learning rate) is worse than the default on women beyond
// max_slice_regression and, with promote "if_blessed", is published
// beside the default without becoming it; `models describe` shows its
// blessing with every gender slice; `models bless` blesses it again
// from the command line without the slice bound; bad bless specs are
// refused naming the field.
func TestBlessingOnCensus(t *testing.T) {
	data := `"generated_rows":6000`
	var dir string
	for _, d := range censusDataDirs {
		if _, err := os.Stat(filepath.Join(d, "adult.test")); err == nil {
			dir, _ = filepath.Abs(d)
			data = fmt.Sprintf(`"dir":%q`, dir)
			break
		}
	}
	if dir == "" {
		t.Logf("UCI Adult not in %v: generated rows", censusDataDirs)
	}
	home := t.TempDir()
	st := testStack(t, home, func(c *stackConfig) {
		if dir != "" {
			c.Trust.dataRoots = append(c.Trust.dataRoots, dir)
		}
	})
	bless := `"bless":{"thresholds":[{"metric":"accuracy","min":0.5},{"metric":"log_loss","max_regression":1}],
		"slices":["gender","race"],"max_slice_regression":0.01,"infra":{"max_latency_ms":2000}}`
	job := func(id, train string) (workflows.JobResult, error) {
		in := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{%s},"train":{%s},"promote":"if_blessed",%s,
			"eval_spec":{"exporters":[{"type":"final"}]},"publish":"final"}`, id, data, train, bless)
		return waitJob(t, startUIStyle(t, st.Client, id, in))
	}
	res, err := job("census_base", `"max_steps":1500`)
	if err != nil {
		t.Fatal(err)
	}
	if b := res.Blessing; b == nil || !b.Blessed || !b.NoBaseline || res.Version != 1 || !res.Default {
		t.Fatalf("first version: %+v (blessing %+v), want blessed without a baseline, the default", res, res.Blessing)
	}
	res, err = job("census_worse", `"max_steps":20`)
	if err != nil {
		t.Fatal(err)
	}
	if b := res.Blessing; b == nil || b.Blessed || b.Baseline != 1 || res.Version != 2 || res.Default {
		t.Fatalf("worse candidate: %+v (blessing %+v), want version 2 not blessed against 1, not the default", res, res.Blessing)
	}
	ctx := context.Background()
	repo, err := bundle.OpenRepository(ctx, filepath.Join(home, "models"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	if def, err := repo.Default(ctx, "census"); err != nil || def != 1 {
		t.Fatalf("default %d (%v): the unblessed candidate took it", def, err)
	}
	bl, err := repo.Blessing(ctx, "census", 2)
	if err != nil {
		t.Fatal(err)
	}
	genders := map[string]bool{}
	for _, s := range bl.Slices {
		if s.Column == "gender" && s.Judged && s.Baseline != nil {
			genders[s.Value] = true
		}
	}
	if bl.Blessed || bl.WorstSlice == nil || bl.Infra == nil || !bl.Infra.Pass || !genders["Female"] || !genders["Male"] ||
		!strings.Contains(strings.Join(bl.Reasons, "\n"), "slice ") || bl.JobID != "census_worse" {
		t.Fatalf("stored blessing %+v", bl)
	}
	t.Logf("worse candidate: %q; worst slice %s=%s regression %.4f", bl.Reasons, bl.WorstSlice.Column, bl.WorstSlice.Value, *bl.WorstSlice.Regression)

	server := "http://" + st.HTTPAddr
	models := filepath.Join(home, "models")
	code, out, errs := cli(t, "models", "describe", "census", "--version", "2", "--server", server, "--models", models)
	if code != exitOK {
		t.Fatalf("models describe: %d %s", code, errs)
	}
	t.Logf("models describe census --version 2:\n%s", out)
	for _, want := range []string{"model census version 2", "blessing: NOT BLESSED (baseline: version 1)", "worst gender=", "gender  Female", "gender  Male", "race", "max_slice_regression 0.0100", "infra: 16 of 16"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q", want)
		}
	}
	code, out, errs = cli(t, "models", "describe", "census", "--server", server, "--models", models, "--output", "json")
	var meta struct{ Blessing *bundle.Blessing }
	if code != exitOK || json.Unmarshal([]byte(out), &meta) != nil || meta.Blessing == nil || !meta.Blessing.Blessed || meta.Blessing.Version != 1 {
		t.Fatalf("describe of the default as JSON: %d %s %s", code, out, errs)
	}

	// The console's model page: the versions' verdicts, and the shown
	// version's blessing with its slices.
	code, page := get(t, server, "/console/models/census?version=2")
	if code != 200 || !strings.Contains(page, `<td class="blessed">not blessed</td>`) || !strings.Contains(page, `<td class="blessed">blessed</td>`) ||
		!strings.Contains(page, "Blessing of version 2") || strings.Count(page, `<tr class="slice">`) != len(bl.Slices) || !strings.Contains(page, "<td>Female</td>") ||
		!strings.Contains(page, "against the baseline version 1") {
		t.Fatalf("console model page %d:\n%s", code, page)
	}

	evalFile := filepath.Join(dir, "adult.test")
	if dir == "" {
		evalFile = filepath.Join(res.JobDir, "raw", "eval.csv")
	}
	code, out, errs = cli(t, "models", "bless", "census", "--version", "2", "--models", models, "--eval-data", evalFile, "--min", "accuracy=0.5", "--slices", "gender")
	if code != exitOK || !strings.Contains(out, "blessing: BLESSED (baseline: version 1)") || !strings.Contains(out, "reported, not judged") {
		t.Fatalf("models bless: %d\n%s\n%s", code, out, errs)
	}
	if bl, err := repo.Blessing(ctx, "census", 2); err != nil || !bl.Blessed || bl.JobID != "cli" {
		t.Fatalf("the command's blessing was not stored: %+v %v", bl, err)
	}
	code, _, errs = cli(t, "models", "bless", "census", "--version", "2", "--models", models, "--eval-data", evalFile, "--min", "acc=0.5")
	if code != exitUsage || !strings.Contains(errs, `bless.thresholds[0].metric: unknown metric "acc"`) {
		t.Fatalf("bad threshold flag: %d %s", code, errs)
	}

	for _, c := range []struct{ bless, field string }{
		{`"bless":{"thresholds":[{"metric":"acc","min":0.8}]}`, `bless.thresholds[0].metric: unknown metric "acc"`},
		{`"bless":{"slices":["sex"]}`, `bless.slices[0]: the schema has no column "sex"`},
		{`"promote":"maybe"`, `promote: want true, false or "if_blessed"`},
	} {
		_, err := waitJob(t, startUIStyle(t, st.Client, "census_bad", `{"job_id":"census_bad","preset":"census",`+c.bless+`}`))
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want InvalidSpec naming %s", c.bless, err, c.field)
		}
	}
}
