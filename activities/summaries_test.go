package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/tfevents"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestTrainSummariesRates: the chief measures rates only over intervals
// it saw. A chief that joins a distributed job at step 602 (or resumes
// there) has its first point's rate measured from its own first step, not
// from a made-up step 601 a millisecond earlier; one whose first step is
// a summary step writes a point there (replacing the file a predecessor
// started there) with the rates of its first interval, or none if that
// point is flushed before the interval ends.
func TestTrainSummariesRates(t *testing.T) {
	const every, batch = 100, 32
	t0 := time.Unix(1700000000, 0)
	rates := func(stepsPerSec float64) []float64 { return []float64{0, stepsPerSec * batch, stepsPerSec, 0.1} }
	for _, c := range []struct {
		name  string
		steps []int64 // the global steps the chief sees, 10 ms apart
		want  []pendingSummary
	}{
		{"joined at 602", span(602, 700, 1), []pendingSummary{{step: 700, values: rates(100)}}},
		{"joined at 600, a summary step", span(600, 700, 1), []pendingSummary{{step: 600, values: rates(100)}, {step: 700, values: rates(100)}}},
		{"joined at 600, then slower", append([]int64{600}, span(605, 700, 5)...), []pendingSummary{{step: 600, values: rates(500)}, {step: 700, values: rates(500)}}},
		{"async, other workers push between the chief's steps", span(602, 701, 3), []pendingSummary{{step: 701, values: rates(300)}}},
		{"a single process from step 1", span(1, 200, 1), []pendingSummary{{step: 100, values: rates(100)}, {step: 200, values: rates(100)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTrainSummaries(every, batch, func(int64) float64 { return 0.1 })
			var at time.Time
			s.now = func() time.Time { return at }
			for i, step := range c.steps {
				at = t0.Add(time.Duration(i) * 10 * time.Millisecond)
				s.stepped(step, 0)
			}
			if len(s.pending) != len(c.want) {
				t.Fatalf("%d summaries %+v, want %d", len(s.pending), s.pending, len(c.want))
			}
			for i, got := range s.pending {
				if want := c.want[i]; got.step != want.step || !approx(got.values, want.values) {
					t.Errorf("summary %d: got step %d %v, want step %d %v", i, got.step, got.values, want.step, want.values)
				}
			}
		})
	}

	t.Run("flushed before the first interval ends", func(t *testing.T) {
		ctx := context.Background()
		a := &Activities{Home: t.TempDir()}
		a.DataRoots = []string{a.Home}
		jd, err := a.openJobDir(ctx, filepath.Join(a.Home, "job"))
		if err != nil {
			t.Fatal(err)
		}
		defer jd.Close()
		s := newTrainSummaries(every, batch, func(int64) float64 { return 0.1 })
		s.stepped(600, 0.5)
		if err := s.flush(ctx, jd, 600); err != nil {
			t.Fatal(err)
		}
		s.stepped(601, 0.5) // too late for the point at 600
		b, err := jd.st.Read(ctx, path.Join(jobdir.TrainLogsDir, tfevents.FileName(600, "chief")))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := tfevents.Read(bytes.NewReader(b))
		if err != nil || len(evs) != 2 || len(evs[1].Values) != 2 || evs[1].Values["loss"] != 0.5 || evs[1].Values["learning_rate"] != float32(0.1) {
			t.Fatalf("events %+v, %v; want one at step 600 with loss and learning_rate only", evs, err)
		}
	})
}

// span returns from, from+by, … up to the first step at or past to.
func span(from, to, by int64) []int64 {
	var s []int64
	for v := from; ; v += by {
		s = append(s, v)
		if v >= to {
			return s
		}
	}
}

func approx(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) })
}

// TestEventFilesFollowTensorBoardsWatcher holds the event files of a job
// directory to TensorBoard's directory watcher, which takes every file
// whose name holds "tfevents" for an event file
// (event_processing/io_wrapper.py IsTensorFlowEventsFile), reads them in
// name order and never goes back: while the chief, evaluators and an
// aborted write write into logs/ concurrently, every such name a watcher
// can see is a whole event file whose records all pass their CRCs, it
// starts at the step in its name, and names sort in step order.
func TestEventFilesFollowTensorBoardsWatcher(t *testing.T) {
	ctx := context.Background()
	a := &Activities{Home: t.TempDir()}
	root := filepath.Join(a.Home, "job")
	a.DataRoots = []string{a.Home}
	jd, err := a.openJobDir(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer jd.Close()
	logs := filepath.Join(root, jobdir.LogsDir)

	var mu sync.Mutex
	var problems []string
	seen := map[string]bool{}
	// scan is one look of a watcher at every run directory under logs/.
	scan := func() {
		runs, _ := os.ReadDir(logs)
		for _, r := range runs {
			ents, err := os.ReadDir(filepath.Join(logs, r.Name()))
			if err != nil {
				continue
			}
			var firsts []int64
			var names []string
			for _, e := range ents {
				if !strings.Contains(e.Name(), "tfevents") {
					continue
				}
				names = append(names, e.Name())
				first, err := checkEventFile(filepath.Join(logs, r.Name(), e.Name()))
				mu.Lock()
				seen[path.Join(r.Name(), e.Name())] = true
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s/%s: %v", r.Name(), e.Name(), err))
				}
				mu.Unlock()
				firsts = append(firsts, first)
			}
			if !slices.IsSorted(names) || !slices.IsSorted(firsts) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s: names %q in name order start at steps %v, not in step order", r.Name(), names, firsts))
				mu.Unlock()
			}
		}
	}

	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() { // a watcher looking as often as it can
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
				scan()
			}
		}
	}()

	var wg sync.WaitGroup
	// The chief: a summary every 10 steps, flushed at each checkpoint
	// (every 50), and what is left at the end.
	wg.Go(func() {
		s := newTrainSummaries(10, 32, func(int64) float64 { return 0.1 })
		for step := int64(1); step <= 1000; step++ {
			s.stepped(step, 1/float64(step))
			if step%50 == 0 {
				if err := s.flush(ctx, jd, step); err != nil {
					t.Error(err)
				}
			}
		}
		s.close(ctx, jd)
	})
	// Evaluators: the default one and a named one, one file per
	// evaluation.
	for _, name := range []string{"", "holdout"} {
		wg.Go(func() {
			for step := int64(100); step <= 1000; step += 100 {
				if err := jd.evalSummaries(ctx, name, step, train.Metrics{Accuracy: 0.5, LogLoss: 0.7, Examples: 10}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	// Writes that fail half way, and one that succeeds, each looked at
	// while its content is half written.
	wg.Go(func() {
		errAbort := errors.New("abort")
		for i, abort := range []bool{true, true, false} {
			step := int64(2000 + i)
			var b tfevents.Batch
			b.Add(step, time.Now(), []string{"loss"}, []float64{1})
			file := b.File(time.Now())
			key := path.Join(jobdir.LogsDir, "aborted", tfevents.FileName(step, "chief"))
			err := jd.st.WriteFunc(ctx, key, func(w io.Writer) error {
				w.Write(file[:len(file)/2])
				scan()
				if abort {
					return errAbort
				}
				_, err := w.Write(file[len(file)/2:])
				return err
			})
			if abort != errors.Is(err, errAbort) {
				t.Errorf("write %d: %v", i, err)
			}
		}
	})
	wg.Wait()
	close(stop)
	<-watched
	scan()

	for _, p := range problems {
		t.Error(p)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"train/" + tfevents.FileName(10, "chief"), "train/" + tfevents.FileName(960, "chief"),
		"eval/" + tfevents.FileName(1000, "evaluator"), "eval_holdout/" + tfevents.FileName(100, "evaluator"),
		"aborted/" + tfevents.FileName(2002, "chief")} {
		if !seen[want] {
			t.Errorf("the watcher never saw %s", want)
		}
	}
	for name := range seen {
		if strings.HasPrefix(name, "aborted/") && !strings.HasSuffix(name, tfevents.FileName(2002, "chief")) {
			t.Errorf("the watcher saw %s, an aborted write", name)
		}
	}
}

// checkEventFile reads the event file p as TensorBoard would and returns
// the step of its first event after the version event, checking that it
// is the step p's name holds.
func checkEventFile(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, errors.New("listed, then gone: a watcher that moved onto it is stuck")
	}
	if err != nil {
		return 0, err
	}
	evs, err := tfevents.Read(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	if len(evs) < 2 || evs[0].Version != "brain.Event:2" {
		return 0, fmt.Errorf("%d events, want the version event and at least one more", len(evs))
	}
	name := strings.TrimPrefix(filepath.Base(p), tfevents.Prefix)
	digits, _, _ := strings.Cut(name, ".")
	step, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("no step in the name: %v", err)
	}
	if evs[1].Step != step {
		return 0, fmt.Errorf("first step %d, name says %d", evs[1].Step, step)
	}
	return step, nil
}

// TestMetricScalarsByKind: an evaluation's TensorBoard tags are the
// metrics of its model's kind, all of them even where a value is 0 (a
// curve with missing points is a different curve), and none of another
// kind's.
func TestMetricScalarsByKind(t *testing.T) {
	for _, tc := range []struct {
		m    train.Metrics
		tags string
	}{
		{train.Metrics{Accuracy: 0.8, LogLoss: 0.4, AUC: 0.85}, "accuracy auc log_loss precision recall"},
		{train.Metrics{Accuracy: 0.8, LogLoss: 0.4}, "accuracy log_loss"},
		{train.Metrics{RMSE: 1.5, MAE: 1}, "mae rmse"},
	} {
		tags, values := metricScalars(tc.m)
		if strings.Join(tags, " ") != tc.tags || len(values) != len(tags) {
			t.Errorf("metricScalars(%+v) = %v %v, want tags %s", tc.m, tags, values, tc.tags)
		}
		for i, tag := range tags {
			if v, _ := tc.m.Value(tag); v != values[i] {
				t.Errorf("%s = %v, want %v", tag, values[i], v)
			}
		}
	}
}

// TestSummaryLearningRateFollowsTheSchedule: the learning_rate curve is
// the schedule's at each global step, not the base rate.
func TestSummaryLearningRateFollowsTheSchedule(t *testing.T) {
	in := workflows.TrainInput{Model: jobspec.ModelSpec{LearningRate: 0.01, LearningRateSchedule: &train.LRSchedule{Type: train.CosineSchedule}},
		Train: jobspec.TrainSpec{MaxSteps: 100}}
	rate := learningRates(in)
	for _, c := range []struct {
		step int64
		want float64
	}{{0, 0.01}, {50, 0.005}, {100, 0}} {
		if got := rate(c.step); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("learning_rate at step %d = %v, want %v", c.step, got, c.want)
		}
	}
	in.Model.LearningRateSchedule = nil
	if got := learningRates(in)(100); got != 0.01 {
		t.Fatalf("constant learning_rate at step 100 = %v, want 0.01", got)
	}
}
