package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/trainflow/trainflow/workflows"
)

// BenchmarkTrainChild measures what training in a child process costs:
// a census job's Train (the BASIC tier's one process; 20000 and 100000
// steps, 5 checkpoints) from scratch, in this process and in a child,
// reporting steps/s: the child pays its start (≈1 s for the worker
// binary) once per attempt. Compare the two within one run:
//
//	go test ./activities -run '^$' -bench TrainChild -count 5
func BenchmarkTrainChild(b *testing.B) {
	acts := newActs(b)
	e := env(acts)
	s := spec("bench_1")
	prep, pre := prepare(b, e, acts, s)
	in := workflows.TrainInput{JobDir: prep.JobDir, Dim: pre.Dim, Classes: pre.Classes, TransformHash: pre.TransformHash, Model: s.Model, Train: s.Train}
	for _, steps := range []int64{20000, 100000} {
		in.Train.MaxSteps, in.Train.SaveCheckpointsSteps = steps, steps/5
		for _, mode := range []struct {
			name      string
			inProcess bool
		}{{"in-process", true}, {"child", false}} {
			benchTrain(b, fmt.Sprintf("steps=%d/%s", steps, mode.name), acts, e, in, mode.inProcess)
		}
	}
}

// benchTrain runs Train on in from scratch b.N times.
func benchTrain(b *testing.B, name string, acts *Activities, e *testsuite.TestActivityEnvironment, in workflows.TrainInput, inProcess bool) {
	b.Run(name, func(b *testing.B) {
		acts.InProcess = inProcess
		var took time.Duration
		for b.Loop() {
			b.StopTimer()
			if err := os.RemoveAll(filepath.Join(in.JobDir, "checkpoints")); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			t0 := time.Now()
			if _, err := e.ExecuteActivity(acts.Train, in); err != nil {
				b.Fatal(err)
			}
			took += time.Since(t0)
		}
		b.ReportMetric(float64(in.Train.MaxSteps)*float64(b.N)/took.Seconds(), "steps/s")
	})
}
