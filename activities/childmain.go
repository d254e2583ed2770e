package activities

// The child's side of training and evaluation in a child process (see
// child.go): `trainflow train-child REQUEST.json`.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// trainChildJob is a training run for a child: the activity's input and
// the job directory and local shards the parent resolved and staged.
type trainChildJob struct {
	In      workflows.TrainInput     `json:"in"`
	JobDir  string                   `json:"job_dir"`
	Cache   string                   `json:"cache"`
	DataDir string                   `json:"data_dir"`
	Dim     int                      `json:"dim"`
	Shards  []preprocess.ShardResult `json:"shards"`
}

// evaluateChildJob is an evaluation for a child: the pinned checkpoint of
// Step, on the first Rows rows (all if 0) of the local shards.
type evaluateChildJob struct {
	JobDir  string                   `json:"job_dir"`
	Cache   string                   `json:"cache"`
	Step    int64                    `json:"step"`
	DataDir string                   `json:"data_dir"`
	Dim     int                      `json:"dim"`
	Shards  []preprocess.ShardResult `json:"shards"`
	Rows    int                      `json:"rows"`
}

// exportChildJob is an export for a child: the bundle of In.Step.
type exportChildJob struct {
	JobDir string                `json:"job_dir"`
	Cache  string                `json:"cache"`
	In     workflows.ExportInput `json:"in"`
}

// childStepEvery is how often a training child reports its step.
const childStepEvery = 200 * time.Millisecond

// ChildMain is the body of `trainflow train-child REQUEST.json`, the child
// process Train, Evaluate and a large model's Export run their work in: it
// sets the request's memory limits on itself, runs it, talking to the
// parent on file descriptors 3 (to) and 4 (from), and returns the exit
// code (0 once its final message is sent). It exits at once if the parent goes away.
// models builds the job's model: the worker's Activities.ModelTypes (the
// same binary, so the same registry).
func ChildMain(ctx context.Context, models *train.Registry, args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: trainflow "+ChildCommand+" REQUEST.json (started by a worker)")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "read request:", err)
		return 1
	}
	var req childRequest
	if err := json.Unmarshal(b, &req); err != nil {
		fmt.Fprintln(stderr, "read request:", err)
		return 1
	}
	applyLimits(req.Limits, stderr)
	c := &childConn{out: json.NewEncoder(os.NewFile(3, "to-parent")), replies: make(chan childReply)}
	go c.readReplies(os.NewFile(4, "from-parent"))
	var final childMsg
	switch {
	case req.Train != nil:
		final = childTrain(ctx, models, req.Train, c)
	case req.Evaluate != nil:
		final = childEvaluate(ctx, models, req.Evaluate)
	case req.Export != nil:
		final = childExport(ctx, req.Export)
	default:
		final = childMsg{Kind: "error", Error: "train-child: empty request"}
	}
	if err := c.send(final); err != nil {
		fmt.Fprintln(stderr, "send result:", err)
		return 1
	}
	return 0
}

// applyLimits sets lim on this process (see ChildLimits).
func applyLimits(lim ChildLimits, stderr io.Writer) {
	if lim.Heap > 0 {
		debug.SetMemoryLimit(lim.Heap)
	}
	if lim.Data > 0 {
		rl := &syscall.Rlimit{Cur: uint64(lim.Data), Max: uint64(lim.Data)}
		if err := syscall.Setrlimit(syscall.RLIMIT_DATA, rl); err != nil {
			fmt.Fprintln(stderr, "set RLIMIT_DATA:", err)
		}
	}
	// The kernel's OOM killer takes this process before the worker.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
}

// childConn is the child's end of the protocol.
type childConn struct {
	mu      sync.Mutex
	out     *json.Encoder
	replies chan childReply
}

func (c *childConn) send(m childMsg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Encode(m)
}

// readReplies passes the parent's replies on; the end of them (the
// parent died or gave up) ends this process.
func (c *childConn) readReplies(r io.Reader) {
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var rep childReply
		if err := dec.Decode(&rep); err != nil {
			os.Exit(1)
		}
		c.replies <- rep
	}
}

// commit reports a committed checkpoint and waits for the parent.
func (c *childConn) commit(p train.Progress) error {
	if err := c.send(childMsg{Kind: "commit", Progress: &p, Step: p.Step}); err != nil {
		return err
	}
	if rep := <-c.replies; rep.Stop != "" {
		return errors.New(rep.Stop)
	}
	return nil
}

// errorMsg is the final message of a run that failed with err.
func errorMsg(err error) childMsg {
	m := childMsg{Kind: "error", Error: err.Error()}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		m.ErrType, m.NonRetryable = ae.Type(), ae.NonRetryable()
	}
	return m
}

// trainConfig is the train.Config of in, committing to jd's checkpoints,
// its model built by models.
func trainConfig(in workflows.TrainInput, jd *jobDir, models *train.Registry) train.Config {
	return train.Config{
		BatchSize: in.Model.BatchSize, MaxSteps: in.Train.MaxSteps, LearningRate: in.Model.LearningRate, Schedule: in.Model.OptimizerConfig().Schedule,
		L1: in.Model.L1, L2: in.Model.L2, Optimizer: in.Model.Optimizer, Momentum: in.Model.Momentum, ClipNorm: in.Model.ClipNorm,
		Seed: in.Train.Seed, SaveSteps: in.Train.SaveCheckpointsSteps, KeepMax: in.Train.KeepCheckpointMax,
		SaveEvery:   time.Duration(in.Train.SaveCheckpointsSecs) * time.Second,
		Checkpoints: jd.Checkpoints(),
		Meta:        checkpointMeta(in),
		Models:      models,
	}
}

// childTrain trains as Activities.train does, reporting steps every
// childStepEvery and each commit to the parent, and writing the training
// summaries itself.
func childTrain(ctx context.Context, models *train.Registry, j *trainChildJob, c *childConn) childMsg {
	d, err := jobdir.Open(ctx, j.JobDir, j.Cache)
	if err != nil {
		return errorMsg(err)
	}
	jd := newJobDir(d)
	defer jd.Close()
	data, err := loadSplit(j.DataDir, j.Dim, j.Shards)
	if err != nil {
		return errorMsg(err)
	}
	in := j.In
	cfg := trainConfig(in, jd, models)
	sums := newTrainSummaries(in.Train.SaveSummarySteps, in.Model.BatchSize, learningRates(in))
	var mu sync.Mutex
	var step, sent int64
	loss, summaryLoss := math.NaN(), math.NaN()
	sums.onLoss = func(l float64) { summaryLoss = l } // called by sums.stepped, in Stepped
	cfg.Stepped = func(s int64, l float64) {
		sums.stepped(s, l)
		mu.Lock()
		step, loss = s, summaryLoss
		mu.Unlock()
	}
	report := func() {
		mu.Lock()
		s, n, l := step, step-sent, loss
		sent = step
		mu.Unlock()
		if n > 0 {
			if math.IsNaN(l) || math.IsInf(l, 0) {
				l = 0
			}
			_ = c.send(childMsg{Kind: "step", Step: s, Steps: n, Loss: l})
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(childStepEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				report()
			}
		}
	})
	cfg.BeforeSave = sums.saving(ctx, jd)
	res, err := train.Run(ctx, cfg, data, func(p train.Progress) error {
		report()
		return c.commit(p)
	})
	close(stop)
	wg.Wait()
	report()
	if ferr := sums.flush(ctx, jd, -1); ferr != nil {
		fmt.Fprintln(os.Stderr, "write training summaries:", ferr)
	}
	if err != nil {
		return errorMsg(diverged(err))
	}
	return childMsg{Kind: "done", Result: &res}
}

// childEvaluate evaluates the pinned checkpoint of j.Step.
func childEvaluate(ctx context.Context, models *train.Registry, j *evaluateChildJob) childMsg {
	d, err := jobdir.Open(ctx, j.JobDir, j.Cache)
	if err != nil {
		return errorMsg(err)
	}
	jd := newJobDir(d)
	defer jd.Close()
	ck, err := jd.Checkpoints().In(jobdir.PinnedDir).Read(ctx, j.Step)
	if err != nil {
		return errorMsg(fmt.Errorf("evaluate checkpoint %d: %w", j.Step, err))
	}
	m, err := evaluateOn(models, ck, j.DataDir, j.Dim, j.Shards, j.Rows)
	if err != nil {
		return errorMsg(err)
	}
	if err := checkFinite(j.Step, m); err != nil {
		return errorMsg(err)
	}
	return childMsg{Kind: "done", Metrics: &m}
}

// childExport writes the bundle of j.In.Step (jobDir.export).
func childExport(ctx context.Context, j *exportChildJob) childMsg {
	d, err := jobdir.Open(ctx, j.JobDir, j.Cache)
	if err != nil {
		return errorMsg(err)
	}
	jd := newJobDir(d)
	defer jd.Close()
	if err := jd.export(ctx, j.In); err != nil {
		return errorMsg(err)
	}
	return childMsg{Kind: "done"}
}

// evaluateOn evaluates the model of ck, built by models, on the first
// rows rows (all if 0) of shards in dataDir.
func evaluateOn(models *train.Registry, ck *train.Checkpoint, dataDir string, dim int, shards []preprocess.ShardResult, rows int) (train.Metrics, error) {
	model, err := models.Load(ck)
	if err != nil {
		return train.Metrics{}, err
	}
	data, err := loadSplit(dataDir, dim, shards)
	if err != nil {
		return train.Metrics{}, err
	}
	if rows > 0 && rows < len(data.Y) {
		data.X, data.Y = data.X[:rows*data.Dim], data.Y[:rows]
	}
	return train.Evaluate(model, data.X, data.Y, evalBatch), nil
}

// checkFinite fails an evaluation of step whose metrics are not finite (a
// checkpoint of weights so large its outputs overflow).
func checkFinite(step int64, mt train.Metrics) error {
	for _, d := range train.MetricDefs {
		if v, _ := mt.Value(d.Name); v-v != 0 && mt.Examples > 0 {
			return diverged(fmt.Errorf("%w: evaluation of checkpoint %d: %s is %v", train.ErrNonFinite, step, d.Name, v))
		}
	}
	return nil
}
