package activities

import (
	"context"
	"math"
	"path"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TensorBoard event files: <job_dir>/logs/train/ (the chief's training
// scalars, jobdir.TrainLogsDir) and logs/eval/ (one file per evaluation;
// logs/eval_<name>/ for a named evaluation: jobdir.EvalLogsDir), so
// `tensorboard --logdir <job_dir>` shows the job's curves, and --logdir
// over several job dirs puts them side by side.

// writeSummaries writes batch as the event file in the directory run whose first event
// is at step, replacing one a retry or a resumed run wrote from that step.
func (j *jobDir) writeSummaries(ctx context.Context, run, writer string, step int64, b *tfevents.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return j.st.Write(ctx, path.Join(run, tfevents.FileName(step, writer)), b.File(time.Now()))
}

// metricScalars returns an evaluation's metrics as TensorBoard tags and
// values, sorted by tag: every metric that applies to the model's kind
// (train.MetricDefs).
func metricScalars(m train.Metrics) (tags []string, values []float64) {
	k := m.Kind()
	for _, d := range train.MetricDefs {
		if d.Applies(k) {
			tags = append(tags, d.Name)
		}
	}
	slices.Sort(tags)
	for _, t := range tags {
		v, _ := m.Value(t)
		values = append(values, v)
	}
	return tags, values
}

// evalSummaries writes the event file of one evaluation.
func (j *jobDir) evalSummaries(ctx context.Context, name string, step int64, m train.Metrics) error {
	var b tfevents.Batch
	tags, values := metricScalars(m)
	b.Add(step, time.Now(), tags, values)
	return j.writeSummaries(ctx, jobdir.EvalLogsDir(name), "evaluator", step, &b)
}

// trainSummaries collects the chief's training scalars every `every`
// global steps and writes those up to each committed checkpoint as one
// event file named by its first step (and what is left when the activity
// ends). A chief that resumes from a checkpoint redoes the steps after it
// and starts its next file at the same step as the file its predecessor
// wrote from there, replacing it: no step is shown twice.
//
// The scalars are the chief's own: the mean loss of the batches it
// computed and the global step rate it saw. In a distributed job the
// chief sees global steps only from the moment it joins, so its curves
// start at the first summary step after that (other workers may have
// taken the job to step 602 before the chief's first push), and it
// measures rates only between steps it saw: the first point after a
// (re)start covers the interval from the chief's first step to it. A
// first step that is itself a summary step has no interval before it: its
// point (which a resumed chief must write, to replace the file its
// predecessor started there) takes the rates of the chief's first
// interval, after it, or has none if it is flushed before that.
type trainSummaries struct {
	every           int64
	examplesPerStep float64
	// rate is the learning rate at a global step.
	rate func(step int64) float64
	// onLoss, if set, gets each summary's mean loss.
	onLoss func(float64)
	// now is the clock (time.Now; tests set their own).
	now func() time.Time

	mu       sync.Mutex // a distributed chief commits on another goroutine
	pending  []pendingSummary
	next     int64 // the first global step of the next summary
	lossSum  float64
	lossN    int
	lastStep int64     // the global step rates are measured from
	lastAt   time.Time // when the chief saw lastStep; zero before its first step
	// unrated: the last pending summary is at the chief's first step and
	// waits for the rates of its first interval.
	unrated bool
}

type pendingSummary struct {
	step   int64
	at     time.Time
	values []float64
}

var trainTags = []string{"loss", "examples_per_sec", "global_step/sec", "learning_rate"}

// learningRates is the learning rate of in's job at each global step (its
// schedule's, train.LRSchedule).
func learningRates(in workflows.TrainInput) func(step int64) float64 {
	oc, maxSteps := in.Model.OptimizerConfig(), in.Train.MaxSteps
	return func(step int64) float64 { return oc.RateAt(step, maxSteps) }
}

func newTrainSummaries(every int64, examplesPerStep int, rate func(step int64) float64) *trainSummaries {
	if every <= 0 {
		every = 100
	}
	return &trainSummaries{every: every, examplesPerStep: float64(examplesPerStep), rate: rate, now: time.Now}
}

// stepped records the loss of the batch that took the job to step.
func (s *trainSummaries) stepped(step int64, loss float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.lossSum += loss
	s.lossN++
	if s.lastAt.IsZero() { // the first step this process saw: rates are measured from here
		s.lastStep, s.lastAt = step, now
		s.next = (step + s.every - 1) / s.every * s.every
		if step == s.next { // a summary step, with no interval before it
			s.add(step, now, math.NaN())
			s.unrated = true
		}
		return
	}
	if !now.After(s.lastAt) || step <= s.lastStep {
		return
	}
	stepsPerSec := float64(step-s.lastStep) / now.Sub(s.lastAt).Seconds()
	if s.unrated { // the chief's first interval rates the summary at its first step
		if n := len(s.pending); n > 0 && s.pending[n-1].step == s.lastStep {
			s.pending[n-1].values[1], s.pending[n-1].values[2] = stepsPerSec*s.examplesPerStep, stepsPerSec
		}
		s.unrated = false
	}
	if step < s.next {
		return
	}
	s.add(step, now, stepsPerSec)
}

// add appends the summary at step, ending the current interval; a NaN
// stepsPerSec is filled in later, or the rates are left out.
func (s *trainSummaries) add(step int64, now time.Time, stepsPerSec float64) {
	loss := s.lossSum / float64(s.lossN)
	s.pending = append(s.pending, pendingSummary{step, now, []float64{loss, stepsPerSec * s.examplesPerStep, stepsPerSec, s.rate(step)}})
	if s.onLoss != nil {
		s.onLoss(loss)
	}
	s.lossSum, s.lossN, s.lastStep, s.lastAt = 0, 0, step, now
	s.next = (step/s.every + 1) * s.every
}

// saving is the train.Config.BeforeSave (dist.Hooks.BeforeSave) of the
// chief: the summaries up to a checkpoint's step are written before the
// checkpoint is, so a chief killed between the two leaves a file that the
// run resuming from the checkpoint before writes again under the same
// name. Written after the commit, they were lost with a chief killed in
// between: the resumed run starts after their steps (the likely cause of
// a CI run missing steps 7100–8000 when its stack was stopped).
func (s *trainSummaries) saving(ctx context.Context, jd *jobDir) func(step int64) error {
	return func(step int64) error { return s.flush(ctx, jd, step) }
}

// flush writes the summaries up to step (all of them if step < 0). The
// write goes ahead even if ctx was just cancelled (the last flush, as the
// activity ends), and what it could not write stays pending for the next
// flush.
func (s *trainSummaries) flush(ctx context.Context, jd *jobDir, step int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	s.mu.Lock()
	n := len(s.pending)
	if step >= 0 {
		n = 0
		for n < len(s.pending) && s.pending[n].step <= step {
			n++
		}
	}
	out := s.pending[:n:n]
	s.pending = s.pending[n:]
	s.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	var b tfevents.Batch
	for _, p := range out {
		if math.IsNaN(p.values[2]) { // flushed before its rates were known
			b.Add(p.step, p.at, []string{trainTags[0], trainTags[3]}, []float64{p.values[0], p.values[3]})
			continue
		}
		b.Add(p.step, p.at, trainTags, p.values)
	}
	if err := jd.writeSummaries(ctx, jobdir.TrainLogsDir, "chief", out[0].step, &b); err != nil {
		s.mu.Lock()
		s.pending = append(out, s.pending...)
		s.mu.Unlock()
		return err
	}
	return nil
}

// close writes what is left when the activity ends, even if it ends
// because its context was cancelled.
func (s *trainSummaries) close(ctx context.Context, jd *jobDir) {
	if err := s.flush(ctx, jd, -1); err != nil {
		activity.GetLogger(ctx).Warn("write training summaries", "error", err)
	}
}
