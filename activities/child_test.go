package activities

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/testenv/race"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// maxRSS is this process's peak resident set, in bytes.
func maxRSS(t *testing.T) int64 {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Maxrss * 1024
}

// hashSpec is a census job whose workclass column is hashed into
// buckets one-hot features, on rows generated rows.
func hashSpec(id string, buckets, rows int) jobspec.JobSpec {
	s := spec(id)
	s.Data.GeneratedRows = rows
	sc := *s.Data.Schema
	sc.Columns = append([]preprocess.Column{}, sc.Columns...)
	for i, c := range sc.Columns {
		if c.Name == "workclass" {
			sc.Columns[i].Treatment, sc.Columns[i].HashBuckets = preprocess.Hash, buckets
		}
	}
	s.Data.Schema = &sc
	return s
}

// TestChildKilledTwiceFailsTheJob runs the out-of-memory specs
// with the memory estimate bypassed (a limit far above the machine) and a
// small limit on the child: the child, not this process (the worker),
// runs out of memory; the first attempt fails retryably, leaving the kill
// count in its heartbeat, and the attempt that reads one kill from its
// predecessor fails for good, naming the limit. The worker's peak RSS
// does not grow by the memory the spec asks for.
func TestChildKilledTwiceFailsTheJob(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector's shadow memory in the child (the instrumented test binary) does not fit the test's 400 MB RLIMIT_DATA: ThreadSanitizer, not the spec, fails first; the run without -race covers this test")
	}
	acts := newActs(t)
	e := env(acts)
	census := spec("oom_census")
	censusPrep, censusPre := prepare(t, e, acts, census)
	// The hash column of 2^20 buckets, on few enough rows that
	// its shards stay small (8 MiB a row).
	hashed := hashSpec("oom_hash", 1<<20, 8)
	hashPrep, hashPre := prepare(t, e, acts, hashed)
	acts.MaxTrainBytes = 1 << 45 // the estimate says yes: the child's limit must hold
	acts.ChildMemory = 400e6
	for _, c := range []struct {
		name  string
		input func() workflows.TrainInput
	}{
		{"batch 65536 × hash 2^20", func() workflows.TrainInput {
			in := workflows.TrainInput{JobDir: hashPrep.JobDir, Dim: hashPre.Dim, Classes: hashPre.Classes, TransformHash: hashPre.TransformHash, Model: hashed.Model, Train: hashed.Train}
			in.Model.BatchSize = 65536
			return in
		}},
		{"hidden_units [8192 8192]", func() workflows.TrainInput {
			in := workflows.TrainInput{JobDir: censusPrep.JobDir, Dim: censusPre.Dim, Classes: censusPre.Classes, TransformHash: censusPre.TransformHash, Model: census.Model, Train: census.Train}
			in.Model.Type, in.Model.HiddenUnits = "dnn_classifier", []int{8192, 8192}
			return in
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.input()
			var mu sync.Mutex
			var note killNote
			e.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
				var n killNote
				if d.HasValues() && d.Get(&n) == nil && n.ChildKills > 0 {
					mu.Lock()
					note = n
					mu.Unlock()
				}
			})
			defer e.SetOnActivityHeartbeatListener(nil)
			rss0 := maxRSS(t)
			t0 := time.Now()
			_, err := e.ExecuteActivity(acts.Train, in)
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != ErrTypeChildKilled || ae.NonRetryable() {
				t.Fatalf("attempt 1: %v, want a retryable %s error", err, ErrTypeChildKilled)
			}
			if msg := err.Error(); !strings.Contains(msg, "out of memory") || !strings.Contains(msg, "training child process ran out of memory; its memory limit is 400.0 MB (RLIMIT_DATA)") || !strings.Contains(msg, "1 of 2") {
				t.Fatalf("attempt 1: %q does not say out of memory, name the limit and count 1 of 2", msg)
			}
			mu.Lock()
			got := note
			mu.Unlock()
			if got.ChildKills != 1 {
				t.Fatalf("attempt 1 left child_kills %d in its heartbeat, want 1", got.ChildKills)
			}
			e.SetHeartbeatDetails(got)
			_, err = e.ExecuteActivity(acts.Train, in)
			e.SetHeartbeatDetails(nil)
			if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec || !ae.NonRetryable() {
				t.Fatalf("attempt 2: %v, want a non-retryable InvalidSpec error", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "2 of 2") || !strings.Contains(msg, "not retried again") || !strings.Contains(msg, "--child-memory") {
				t.Fatalf("attempt 2: %q does not count 2 of 2 and name the limit", msg)
			}
			rss1 := maxRSS(t)
			t.Logf("2 attempts in %v; worker max RSS %d MB (grew %d MB); %v", time.Since(t0).Round(time.Millisecond), rss1>>20, (rss1-rss0)>>20, err)
			if rss1-rss0 > 256<<20 {
				t.Errorf("the worker's peak RSS grew by %d MB: the spec's memory landed in the worker", (rss1-rss0)>>20)
			}
		})
	}
}

// TestChildCancelKillsIt cancels a training child by ending the
// activity's context: the activity returns at once with ctx's error, and
// the child's process group is gone.
func TestChildCancelKillsIt(t *testing.T) {
	acts := newActs(t)
	scratch := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	// A request the child cannot read makes it exit; a sleep in its place
	// stands for a child that trains for ever.
	acts.Exe, acts.ExeArgs = "/bin/sh", []string{"-c", "sleep 600 & echo $! > " + scratch + "/pid; wait", "sh"}
	done := make(chan error, 1)
	go func() {
		_, err := acts.runTrainChild(ctx, scratch, childRequest{}, func(childMsg) (childReply, error) { return childReply{}, nil })
		done <- err
	}()
	go func() {
		for {
			if pid, err := readPid(scratch + "/pid"); err == nil && pid > 0 {
				close(started)
				return
			}
			time.Sleep(10 * time.Millisecond) // polling a file the child writes, not a synchronisation of this test's own goroutines
		}
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("child did not start")
	}
	pid, _ := readPid(scratch + "/pid")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("runTrainChild after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runTrainChild did not return after cancel")
	}
	// The grandchild (the sleep, in the child's process group) is killed too.
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d of the child's group still alive after cancel", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// TestChildDeathIsClassified tells a child killed by a signal (as the
// kernel's OOM killer does) from one that crashed for another reason:
// only the first counts towards MaxChildKills.
func TestChildDeathIsClassified(t *testing.T) {
	acts := newActs(t)
	for _, c := range []struct {
		name, script string
		killed       bool
		want         string
	}{
		{"SIGKILL", "kill -9 $$", true, "killed by signal killed (the kernel's OOM killer, or an operator)"},
		{"runtime out of memory", "echo 'fatal error: out of memory' >&2; echo 'goroutine 1 [running]:' >&2; exit 2", true, "ran out of memory"},
		{"crash", "echo 'panic: boom' >&2; exit 2", false, "exit status 2: panic: boom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			acts.Exe, acts.ExeArgs = "/bin/sh", []string{"-c", c.script, "sh"}
			_, err := acts.runTrainChild(context.Background(), t.TempDir(), childRequest{}, func(childMsg) (childReply, error) { return childReply{}, nil })
			if errors.Is(err, errChildKilled) != c.killed || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (killed %v), want killed %v and %q", err, errors.Is(err, errChildKilled), c.killed, c.want)
			}
		})
	}
}

// TestTailLineWith: the ceiling's message is found on a line of its own
// and inside a runner's log line, where the error is a quoted value whose
// quotes must not reach the job's error (it names data.schema column
// "workclass", quotes and all).
func TestTailLineWith(t *testing.T) {
	const msg = `preprocess: shards over the worker's ceiling: mostly data.schema column "workclass" hash_buckets 1048576`
	for _, c := range []struct{ name, out string }{
		{"plain", "starting\n" + msg + "\n"},
		{"prefixed", "starting\nerror: " + msg + "\n"},
		{"log value", "starting\n" + `time=2026-11-26T09:11:34Z level=ERROR msg="stage failed" error=` + strconv.Quote("transform: "+msg) + " stage=3\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tl tail
			tl.Write([]byte(c.out))
			if got := tl.lineWith("preprocess: shards over the worker's ceiling"); got != msg {
				t.Errorf("lineWith: got %q, want %q", got, msg)
			}
		})
	}
	var tl tail
	tl.Write([]byte("nothing here\n"))
	if got := tl.lineWith("preprocess: shards"); got != "" {
		t.Errorf("lineWith without the message: %q, want none", got)
	}
}
