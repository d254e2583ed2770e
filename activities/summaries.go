package activities

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"time"

	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/train"
)

// TensorBoard event files: <job_dir>/logs/train/ (the chief's training
// scalars) and logs/eval/ (one file per evaluation; logs/eval_<name>/
// for a named evaluation), so `tensorboard --logdir <job_dir>` shows the
// job's curves, and --logdir over several job dirs puts them side by side.
const logsDir = "logs"

// summaryRun is the TensorBoard run (directory under logs/) of an
// evaluation called name.
func summaryRun(name string) string {
	if name == "" || name == "eval" {
		return "eval"
	}
	return "eval_" + name
}

// writeSummaries writes batch as the event file of run whose last event is
// at step, replacing one a retry or a resumed run wrote for the same step.
func (j *jobDir) writeSummaries(ctx context.Context, run, writer string, step int64, b *tfevents.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return j.st.Write(ctx, path.Join(logsDir, run, tfevents.FileName(step, writer)), b.File(time.Now()))
}

// metricScalars returns an evaluation's metrics as TensorBoard tags and
// values, sorted by tag: every metric the model kind has.
func metricScalars(m train.Metrics) (tags []string, values []float64) {
	b, _ := json.Marshal(m)
	var all map[string]float64
	json.Unmarshal(b, &all)
	delete(all, "examples")
	if m.RMSE != 0 || m.MAE != 0 { // a regressor: no classes to be accurate about
		delete(all, "accuracy")
		delete(all, "log_loss")
	}
	for k := range all {
		tags = append(tags, k)
	}
	slices.Sort(tags)
	for _, k := range tags {
		values = append(values, all[k])
	}
	return tags, values
}

// evalSummaries writes the event file of one evaluation.
func (j *jobDir) evalSummaries(ctx context.Context, name string, step int64, m train.Metrics) error {
	var b tfevents.Batch
	tags, values := metricScalars(m)
	b.Add(step, time.Now(), tags, values)
	return j.writeSummaries(ctx, summaryRun(name), "evaluator", step, &b)
}
