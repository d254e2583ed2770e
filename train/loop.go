package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Data is a dense training set: len(Y) rows of Dim features in X.
type Data struct {
	Dim int
	X   []float64
	Y   []float64
}

// Config configures Run.
type Config struct {
	BatchSize    int
	MaxSteps     int64
	LearningRate float64
	L2           float64
	// Seed fixes the order of examples: epoch e visits the rows in the
	// permutation drawn from PCG(Seed, e), so the batch of any step is a
	// function of (Seed, step) and a resumed run sees the same batches.
	Seed uint64
	// SaveSteps is the checkpoint interval; a checkpoint is always written
	// at MaxSteps.
	SaveSteps     int64
	KeepMax       int
	CheckpointDir string
	Meta          CheckpointMeta
}

// Progress is reported after every checkpoint.
type Progress struct {
	Step           int64   `json:"step"`
	Loss           float64 `json:"loss"`
	ExamplesPerSec float64 `json:"examples_per_sec"`
}

// Result summarises a finished Run.
type Result struct {
	Step        int64   `json:"step"`
	ResumedFrom int64   `json:"resumed_from"`
	Loss        float64 `json:"loss"`
}

// Run trains a linear classifier on data with Adam from the newest
// checkpoint in cfg.CheckpointDir (or from zero), committing a checkpoint
// every cfg.SaveSteps steps and calling report after each. It returns when
// cfg.MaxSteps is reached or ctx is done.
func Run(ctx context.Context, cfg Config, data Data, report func(Progress) error) (Result, error) {
	n := len(data.Y)
	if n == 0 || cfg.BatchSize < 1 || cfg.MaxSteps < 1 || data.Dim != cfg.Meta.Dim {
		return Result{}, fmt.Errorf("%w: %d rows of dim %d, batch %d, max steps %d, model dim %d",
			ErrShape, n, data.Dim, cfg.BatchSize, cfg.MaxSteps, cfg.Meta.Dim)
	}
	m, err := NewLinear(cfg.Meta.Dim, cfg.Meta.Classes)
	if err != nil {
		return Result{}, err
	}
	opt := NewAdam(cfg.LearningRate, len(m.Params))
	opt.L2 = cfg.L2
	var step int64
	ck, err := LatestCheckpoint(cfg.CheckpointDir)
	if err != nil {
		return Result{}, err
	}
	if ck != nil {
		if err := restore(ck, cfg.Meta, m, opt); err != nil {
			return Result{}, err
		}
		step = ck.Step
	}
	res := Result{Step: step, ResumedFrom: step}
	b := cfg.BatchSize
	perEpoch := int64((n + b - 1) / b)
	xb := make([]float64, b*data.Dim)
	yb := make([]float64, b)
	grad := make([]float64, len(m.Params))
	var perm []int
	epoch := int64(-1)
	since, examples, lossSum, lossN := time.Now(), 0, 0.0, 0
	for step < cfg.MaxSteps {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if e := step / perEpoch; e != epoch {
			epoch = e
			perm = rand.New(rand.NewPCG(cfg.Seed, uint64(epoch))).Perm(n)
		}
		lo := int(step%perEpoch) * b
		rows := perm[lo:min(lo+b, n)]
		for i, r := range rows {
			copy(xb[i*data.Dim:(i+1)*data.Dim], data.X[r*data.Dim:(r+1)*data.Dim])
			yb[i] = data.Y[r]
		}
		loss := m.Gradient(grad, xb[:len(rows)*data.Dim], yb[:len(rows)])
		opt.Update(m.Params, grad)
		step++
		examples += len(rows)
		lossSum += loss
		lossN++
		if step%max(cfg.SaveSteps, 1) == 0 || step == cfg.MaxSteps {
			if err := SaveCheckpoint(cfg.CheckpointDir, snapshot(step, cfg.Meta, m, opt), cfg.KeepMax); err != nil {
				return res, err
			}
			res.Step, res.Loss = step, lossSum/float64(lossN)
			p := Progress{Step: step, Loss: res.Loss, ExamplesPerSec: float64(examples) / time.Since(since).Seconds()}
			since, examples, lossSum, lossN = time.Now(), 0, 0, 0
			if report != nil {
				if err := report(p); err != nil {
					return res, err
				}
			}
		}
	}
	return res, nil
}

func snapshot(step int64, meta CheckpointMeta, m *Linear, opt *Adam) *Checkpoint {
	return &Checkpoint{Step: step, Meta: meta, Tensors: map[string][]float64{
		"params": m.Params, "adam/m": opt.M, "adam/v": opt.V, "adam/t": {float64(opt.T)},
	}}
}

func restore(ck *Checkpoint, meta CheckpointMeta, m *Linear, opt *Adam) error {
	if ck.Meta != meta {
		return fmt.Errorf("%w: checkpoint at step %d is for %+v, not %+v", ErrCheckpoint, ck.Step, ck.Meta, meta)
	}
	for name, dst := range map[string][]float64{"params": m.Params, "adam/m": opt.M, "adam/v": opt.V} {
		if len(ck.Tensors[name]) != len(dst) {
			return fmt.Errorf("%w: tensor %q has %d values, want %d", ErrCheckpoint, name, len(ck.Tensors[name]), len(dst))
		}
		copy(dst, ck.Tensors[name])
	}
	if t := ck.Tensors["adam/t"]; len(t) == 1 {
		opt.T = int64(t[0])
	}
	return nil
}

// LoadLinear rebuilds the model saved in a checkpoint.
func LoadLinear(ck *Checkpoint) (*Linear, error) {
	m, err := NewLinear(ck.Meta.Dim, ck.Meta.Classes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if len(ck.Tensors["params"]) != len(m.Params) {
		return nil, fmt.Errorf("%w: params have %d values, want %d", ErrCheckpoint, len(ck.Tensors["params"]), len(m.Params))
	}
	copy(m.Params, ck.Tensors["params"])
	return m, nil
}
