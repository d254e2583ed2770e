package console

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/tfevents"
)

// synthJob is the shape of a synthetic job directory: what the
// activities write for a job of Steps global steps.
type synthJob struct {
	ID           string
	Steps        int64
	SummaryEvery int64 // train.save_summary_steps
	CkptEvery    int64 // train.save_checkpoints_steps; one event file each
	EvalEvery    int64 // an evaluation every that many steps
}

// write writes the job directory under dir, as the chief, evaluator and
// exporters would: job.json, events.jsonl, logs/train event files (one
// per checkpoint, named by its first step), eval/metrics.jsonl, exports
// and the preprocessing manifest.
func (j synthJob) write(tb testing.TB, dir string) {
	tb.Helper()
	mk := func(name string) *bufio.Writer {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { f.Close() })
		return bufio.NewWriterSize(f, 1<<20)
	}
	flush := func(w *bufio.Writer) {
		if err := w.Flush(); err != nil {
			tb.Fatal(err)
		}
	}
	w := mk("job.json")
	fmt.Fprintf(w, `{"job_id":%q,"first_run_id":"run-1"}`, j.ID)
	flush(w)
	w = mk("data/manifest.json")
	w.WriteString(`{"train_rows":32561,"eval_rows":16281,"bad":{"parse":2}}`)
	flush(w)
	at := time.Unix(1700000000, 0)
	ev := mk("events.jsonl")
	fmt.Fprintf(ev, `{"event":"worker_start","task":0,"attempt":1,"pid":11,"time":%q}`+"\n", at.Format(time.RFC3339Nano))
	tags := []string{"loss", "examples_per_sec", "global_step/sec", "learning_rate"}
	var batch tfevents.Batch
	first := int64(1)
	for s := int64(1); s <= j.Steps; s++ {
		t := at.Add(time.Duration(s) * time.Millisecond)
		if s%j.SummaryEvery == 0 {
			loss := 0.3 + 0.4/float64(1+s/1000) + 0.01*float64(s%7)
			batch.Add(s, t, tags, []float64{loss, 20000 + float64(s%13), 300, 0.001})
		}
		if s%j.CkptEvery == 0 || s == j.Steps {
			fmt.Fprintf(ev, `{"event":"checkpoint","global_step":%d,"loss":%g,"examples_per_sec":%d,"time":%q}`+"\n", s, 0.3+0.4/float64(1+s/1000), 20000, t.Format(time.RFC3339Nano))
			if batch.Len() > 0 {
				w := mk("logs/train/" + tfevents.FileName(first, "chief"))
				w.Write(batch.File(t))
				flush(w)
			}
			batch, first = tfevents.Batch{}, s+1
		}
	}
	flush(ev)
	m := mk("eval/metrics.jsonl")
	for s := j.EvalEvery; s <= j.Steps; s += j.EvalEvery {
		fmt.Fprintf(m, `{"name":"eval","global_step":%d,"metrics":{"examples":16281,"accuracy":%g,"log_loss":%g,"auc":%g}}`+"\n",
			s, 0.8+0.05*float64(s)/float64(j.Steps), 0.4-0.05*float64(s)/float64(j.Steps), 0.85+0.05*float64(s)/float64(j.Steps))
	}
	flush(m)
	for _, e := range []string{"best", "final", "latest"} {
		w := mk(fmt.Sprintf("export/%s/%d/metadata.json", e, j.Steps))
		w.WriteString("{}")
		flush(w)
	}
}

// The jobs measured: a 400k-step job with the defaults (summaries every
// 100 steps, checkpoints every 500, an evaluation per checkpoint), the
// same with a summary every step, and the 30 s job with
// save_summary_steps 1.
var synthJobs = []synthJob{
	{ID: "steps400k", Steps: 400_000, SummaryEvery: 100, CkptEvery: 500, EvalEvery: 500},
	{ID: "steps400k_summary1", Steps: 400_000, SummaryEvery: 1, CkptEvery: 500, EvalEvery: 500},
	{ID: "issue_summary1", Steps: 300_000, SummaryEvery: 1, CkptEvery: 500, EvalEvery: 100_000},
}
