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
	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/workflows"
)

// censusDataDirs are where UCI Adult is looked for: beside the main
// checkout (censusDir) or beside a worktree under /work/wt.
var censusDataDirs = []string{censusDir, "../../../shared/datasets/census"}

// TestBlessingOnCensus runs blessed census jobs on the dev stack (real
// Temporal, worker, Beam child, prediction server): the first version
// has no baseline and is blessed; a candidate trained on rows whose
// women's labels are swapped is worse than the default on women beyond
// max_slice_regression (and only there) and, with promote "if_blessed",
// is published beside the default without becoming it; `models describe`
// and the console show its blessing with both gender slices; `models
// bless` blesses it again from the command line with slices reported,
// not judged; bad bless specs are refused naming the field.
func TestBlessingOnCensus(t *testing.T) {
	var trainFile, evalFile string
	for _, d := range censusDataDirs {
		if _, err := os.Stat(filepath.Join(d, "adult.test")); err == nil {
			dir, _ := filepath.Abs(d)
			trainFile, evalFile = filepath.Join(dir, "adult.data"), filepath.Join(dir, "adult.test")
			break
		}
	}
	data := t.TempDir()
	if trainFile == "" {
		t.Logf("UCI Adult not in %v: generated rows", censusDataDirs)
		var err error
		if trainFile, evalFile, err = datagen.CensusFiles(data, 6000); err != nil {
			t.Fatal(err)
		}
	}
	// The candidate's training rows: every woman's label swapped, so it
	// learns to be wrong about women and stays right about men.
	raw, err := os.ReadFile(trainFile)
	if err != nil {
		t.Fatal(err)
	}
	var flipped strings.Builder
	for line := range strings.Lines(string(raw)) {
		if strings.Contains(line, ", Female,") {
			line = strings.NewReplacer("<=50K", ">50K", ">50K", "<=50K").Replace(line)
		}
		flipped.WriteString(line)
	}
	flippedFile := filepath.Join(data, "women_flipped.csv")
	if err := os.WriteFile(flippedFile, []byte(flipped.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	st := testStack(t, home, func(c *stackConfig) {
		c.Trust.dataRoots = append(c.Trust.dataRoots, filepath.Dir(evalFile))
	})
	bless := `"bless":{"thresholds":[{"metric":"accuracy","min":0.3},{"metric":"log_loss","max_regression":5}],
		"slices":["gender"],"max_slice_regression":0.05,"infra":{"max_latency_ms":2000}}`
	job := func(id, train string) (workflows.JobResult, error) {
		in := fmt.Sprintf(`{"job_id":%q,"preset":"census","data":{"train":[%q],"eval":[%q]},"train":{"max_steps":1500},"promote":"if_blessed",%s,
			"eval_spec":{"exporters":[{"type":"final"}]},"publish":"final"}`, id, train, evalFile, bless)
		return waitJob(t, startUIStyle(t, st.Client, id, in))
	}
	res, err := job("census_base", trainFile)
	if err != nil {
		t.Fatal(err)
	}
	if b := res.Blessing; b == nil || !b.Blessed || !b.NoBaseline || res.Version != 1 || !res.Default {
		t.Fatalf("first version: %+v (blessing %+v), want blessed without a baseline, the default", res, res.Blessing)
	}
	res, err = job("census_worse", flippedFile)
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
	// Only the women's slice fails: men, overall accuracy and the infra
	// check pass.
	pass := map[string]bool{}
	for _, s := range bl.Slices {
		if s.Column == "gender" && s.Judged && s.Baseline != nil {
			pass[s.Value] = s.Pass
		}
	}
	if bl.Blessed || len(pass) != 2 || pass["Female"] || !pass["Male"] || bl.WorstSlice == nil || bl.WorstSlice.Value != "Female" ||
		len(bl.Reasons) != 1 || !strings.HasPrefix(bl.Reasons[0], "slice gender=Female:") || bl.Infra == nil || !bl.Infra.Pass || bl.JobID != "census_worse" {
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
	for _, want := range []string{"model census version 2", "blessing: NOT BLESSED (baseline: version 1)", "worst gender=Female", "gender  Female", "gender  Male", "max_slice_regression 0.0500", "infra: 16 of 16"} {
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

	code, out, errs = cli(t, "models", "bless", "census", "--version", "2", "--models", models, "--eval-data", evalFile, "--min", "accuracy=0.3", "--slices", "gender,race")
	if code != exitOK || !strings.Contains(out, "blessing: BLESSED (baseline: version 1)") || !strings.Contains(out, "reported, not judged") || !strings.Contains(out, "race    White") {
		t.Fatalf("models bless: %d\n%s\n%s", code, out, errs)
	}
	if bl, err := repo.Blessing(ctx, "census", 2); err != nil || !bl.Blessed || bl.JobID != "cli" {
		t.Fatalf("the command's blessing was not stored: %+v %v", bl, err)
	}
	// Without --eval-data: the rows of the version's earlier blessing.
	code, out, errs = cli(t, "models", "bless", "census", "--version", "2", "--models", models, "--max-slice-regression", "0.05", "--slices", "gender", "--dry-run")
	if code != exitOK || !strings.Contains(out, "blessing: NOT BLESSED") || !strings.Contains(out, "slice gender=Female") || !strings.Contains(out, evalFile) {
		t.Fatalf("models bless on the earlier blessing's rows: %d\n%s\n%s", code, out, errs)
	}
	if bl, _ := repo.Blessing(ctx, "census", 2); !bl.Blessed {
		t.Fatal("a --dry-run stored its blessing")
	}
	code, _, errs = cli(t, "models", "bless", "census", "--version", "1", "--models", filepath.Join(t.TempDir(), "empty"))
	if code != exitNotFound {
		t.Fatalf("bless of a model the repository lacks: %d %s", code, errs)
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

// TestWriteBlessingEscapes: a slice value from the data holding terminal
// escapes reaches `models describe`'s text escaped, in the reasons and the
// tables, and cannot forge a line.
func TestWriteBlessingEscapes(t *testing.T) {
	const hostile = "F\x1b]0;pwned\x07\r\nblessing: BLESSED\u202e"
	r := 0.2
	bl := &bundle.Blessing{Reasons: []string{"slice gender=" + hostile + ": worse"}, EvalData: []string{"/d/" + hostile}, JobID: "j",
		Slices:     []bundle.SliceCheck{{Column: "gender", Value: hostile, Examples: 40, Regression: &r, Judged: true}},
		WorstSlice: &bundle.SliceCheck{Column: "gender", Value: hostile, Regression: &r}}
	var b strings.Builder
	if err := writeBlessing(&b, bl); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\r\u202e") || strings.Count("\n"+out, "\nblessing: ") != 1 || !strings.Contains(out, `F\x1b]0;pwned\a\r\nblessing: BLESSED\u202e`) {
		t.Fatalf("blessing text %q: want the slice value escaped", out)
	}
}
