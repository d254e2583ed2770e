package train

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func randData(r *rand.Rand, n, dim, classes int) Data {
	d := Data{Dim: dim, X: make([]float64, n*dim), Y: make([]float64, n)}
	for i := range d.X {
		d.X[i] = r.NormFloat64()
	}
	for i := range d.Y {
		d.Y[i] = float64(r.IntN(classes))
	}
	return d
}

// TestGradientFiniteDifferences checks Gradient against central differences
// of the loss for binary and softmax models.
func TestGradientFiniteDifferences(t *testing.T) {
	for _, classes := range []int{2, 4} {
		r := rand.New(rand.NewPCG(1, uint64(classes)))
		d := randData(r, 7, 5, classes)
		m, _ := NewLinear(5, classes)
		for i := range m.Params() {
			m.Params()[i] = r.NormFloat64() * 0.5
		}
		grad := make([]float64, len(m.Params()))
		m.Gradient(grad, d.X, d.Y)
		scratch := make([]float64, len(m.Params()))
		for i := range m.Params() {
			const h = 1e-6
			orig := m.Params()[i]
			m.Params()[i] = orig + h
			up := m.Gradient(scratch, d.X, d.Y)
			m.Params()[i] = orig - h
			down := m.Gradient(scratch, d.X, d.Y)
			m.Params()[i] = orig
			if num := (up - down) / (2 * h); math.Abs(num-grad[i]) > 1e-6 {
				t.Errorf("classes %d param %d: gradient %v, finite difference %v", classes, i, grad[i], num)
			}
		}
	}
}

func TestAdamMatchesHandComputed(t *testing.T) {
	a := NewAdam(0.1, 1)
	p := []float64{1}
	a.Update(p, []float64{2})
	// t=1: m=0.2, v=0.004, m̂=2, v̂=4, step = 0.1*2/(2+1e-8)
	if want := 1 - 0.1*2/(2+1e-8); math.Abs(p[0]-want) > 1e-15 {
		t.Fatalf("after one step %v, want %v", p[0], want)
	}
	a.Update(p, []float64{-1})
	// t=2: m=0.08, v=0.999·0.004+0.001=0.004996, m̂=m/0.19, v̂=v/0.001999
	m, v := 0.08/0.19, 0.004996/(1-0.999*0.999)
	if want := 1 - 0.1*2/(2+1e-8) - 0.1*m/(math.Sqrt(v)+1e-8); math.Abs(p[0]-want) > 1e-12 {
		t.Fatalf("after two steps %v, want %v", p[0], want)
	}
}

func TestAUC(t *testing.T) {
	tests := []struct {
		scores, labels []float64
		want           float64
	}{
		{[]float64{0.1, 0.4, 0.35, 0.8}, []float64{0, 0, 1, 1}, 0.75},
		{[]float64{0.1, 0.2, 0.3}, []float64{0, 1, 1}, 1},
		{[]float64{0.5, 0.5, 0.5, 0.5}, []float64{0, 1, 0, 1}, 0.5},
		{[]float64{0.9, 0.1}, []float64{0, 1}, 0},
	}
	for _, tt := range tests {
		if got := AUC(tt.scores, tt.labels); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("AUC(%v, %v) = %v, want %v", tt.scores, tt.labels, got, tt.want)
		}
	}
	if got := AUC([]float64{1, 2}, []float64{1, 1}); !math.IsNaN(got) {
		t.Errorf("AUC with one class = %v, want NaN", got)
	}
}

func TestCheckpointRoundTripAndCorruption(t *testing.T) {
	c := &Checkpoint{Step: 42, Meta: CheckpointMeta{Model: "linear", Dim: 2, Classes: 2, TransformHash: "ab"},
		Tensors: map[string][]float64{"params": {1, -2, math.SmallestNonzeroFloat64}, "adam/t": {3}}}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Step != 42 || !back.Meta.Equal(c.Meta) || back.Tensors["params"][2] != math.SmallestNonzeroFloat64 {
		t.Fatalf("round trip = %+v, want %+v", back, c)
	}
	for name, bad := range map[string][]byte{
		"truncated":  b[:len(b)-9],
		"bit flip":   append(append([]byte{}, b[:40]...), append([]byte{b[40] ^ 0x10}, b[41:]...)...),
		"empty":      nil,
		"wrong file": []byte("{\"not\":\"a checkpoint\"}"),
	} {
		if _, err := DecodeCheckpoint(bad); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: error %v, want ErrCheckpoint", name, err)
		}
	}
}

// TestCheckpointHeaderReadsOnlyTheMeta: DecodeCheckpointHeader returns
// the step and meta DecodeCheckpoint does, reading no further than the
// meta (the tensors after it never reach the reader), and refuses a
// foreign, truncated or other-version header and a meta length past
// 1 MiB before allocating it.
func TestCheckpointHeaderReadsOnlyTheMeta(t *testing.T) {
	c := &Checkpoint{Step: 42, Meta: CheckpointMeta{Model: "dnn", Dim: 3, Classes: 2, TransformHash: "ab", Spec: &ModelSpec{HiddenUnits: []int{8, 4}}},
		Tensors: map[string][]float64{"params": make([]float64, 1000)}}
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	end := len(ckptMagic) + 4 + 8 + 4 + int(binary.LittleEndian.Uint32(b[20:]))
	step, meta, err := DecodeCheckpointHeader(bytes.NewReader(b[:end])) // the header alone
	if err != nil || step != 42 || !meta.Equal(c.Meta) || len(meta.Spec.HiddenUnits) != 2 {
		t.Fatalf("DecodeCheckpointHeader = %d, %+v, %v; want 42, %+v", step, meta, err, c.Meta)
	}
	huge := slices.Clone(b)
	binary.LittleEndian.PutUint32(huge[20:], 1<<31)
	other := slices.Clone(b)
	binary.LittleEndian.PutUint32(other[8:], CheckpointVersion+1)
	for name, bad := range map[string][]byte{
		"truncated meta": b[:end-1],
		"no meta length": b[:21],
		"empty":          nil,
		"wrong file":     []byte("{\"not\":\"a checkpoint, not at all\"}"),
		"other version":  other,
		"huge meta":      huge,
	} {
		if _, _, err := DecodeCheckpointHeader(bytes.NewReader(bad)); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: error %v, want ErrCheckpoint", name, err)
		}
	}
}

func separable(n int, seed uint64) Data {
	r := rand.New(rand.NewPCG(seed, 9))
	d := Data{Dim: 3, X: make([]float64, n*3), Y: make([]float64, n)}
	for i := range n {
		x := d.X[i*3 : i*3+3]
		for j := range x {
			x[j] = r.NormFloat64()
		}
		if x[0]+0.5*x[1]-x[2] > 0 {
			d.Y[i] = 1
		}
	}
	return d
}

func config(dir string, steps int64) Config {
	return Config{BatchSize: 16, MaxSteps: steps, LearningRate: 0.05, Seed: 3, SaveSteps: 25, KeepMax: 2,
		CheckpointDir: dir, Meta: CheckpointMeta{Model: "linear", Dim: 3, Classes: 2}}
}

// TestResumeIsBitForBit stops a run at step 50 (a checkpoint), resumes it
// to 200, and compares with an uninterrupted run to 200.
func TestResumeIsBitForBit(t *testing.T) {
	d := separable(500, 1)
	full, cut := t.TempDir(), t.TempDir()
	if _, err := Run(context.Background(), config(full, 200), d, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), config(cut, 50), d, nil); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), config(cut, 200), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ResumedFrom != 50 || res.Step != 200 {
		t.Fatalf("resumed from %d to %d, want 50 to 200", res.ResumedFrom, res.Step)
	}
	a, _ := os.ReadFile(filepath.Join(full, CheckpointName(200)))
	b, _ := os.ReadFile(filepath.Join(cut, CheckpointName(200)))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatal("resumed run's final checkpoint differs from the uninterrupted run's")
	}
	steps, _ := ListCheckpoints(full)
	if len(steps) != 2 || steps[1] != 200 {
		t.Fatalf("kept checkpoints %v, want the newest 2 ending at 200", steps)
	}
	ck, _ := LatestCheckpoint(full)
	m, _ := LoadLinear(ck)
	if acc := Evaluate(m, d.X, d.Y, 64).Accuracy; acc < 0.95 {
		t.Fatalf("accuracy on a separable set %v, want ≥ 0.95", acc)
	}
}

func TestRestoreRefusesAnotherModel(t *testing.T) {
	dir := t.TempDir()
	d := separable(100, 2)
	if _, err := Run(context.Background(), config(dir, 25), d, nil); err != nil {
		t.Fatal(err)
	}
	cfg := config(dir, 50)
	cfg.Meta.TransformHash = "other"
	if _, err := Run(context.Background(), cfg, d, nil); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("restore into another model: %v, want ErrCheckpoint", err)
	}
}

// TestDivergedRunFailsWithoutCheckpoint resumes a healthy run on data that
// makes it diverge: Run fails with ErrNonFinite, at the first non-finite
// loss (SGD) or at the next checkpoint when only the optimizer's slots
// overflowed (Adam's second moments), and the newest checkpoint is still
// the healthy one.
func TestDivergedRunFailsWithoutCheckpoint(t *testing.T) {
	d := separable(200, 4)
	huge := Data{Dim: d.Dim, X: make([]float64, len(d.X)), Y: d.Y}
	for i, x := range d.X {
		huge.X[i] = x * 1e200 // logits of ±1e200·w, gradients of 1e200
	}
	for _, c := range []struct{ optimizer, names string }{{SGDOptimizer, "loss"}, {AdamOptimizer, "adam/v"}} {
		t.Run(c.optimizer, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config(dir, 25)
			cfg.Optimizer = c.optimizer
			if _, err := Run(context.Background(), cfg, d, nil); err != nil {
				t.Fatal(err)
			}
			reported := 0
			cfg.MaxSteps = 100
			res, err := Run(context.Background(), cfg, huge, func(Progress) error { reported++; return nil })
			if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), c.names) {
				t.Fatalf("diverging run: %v, want ErrNonFinite naming %q", err, c.names)
			}
			steps, _ := ListCheckpoints(dir)
			if len(steps) != 1 || steps[0] != 25 || reported != 0 || res.Step != 25 {
				t.Fatalf("checkpoints %v, %d reports, result step %d; want only the healthy step 25, none reported", steps, reported, res.Step)
			}
			ck, err := LatestCheckpoint(dir)
			if err != nil || ck.Step != 25 || ck.CheckFinite() != nil {
				t.Fatalf("latest checkpoint %v, %v: want the finite one at 25", ck, err)
			}
		})
	}
}

// TestCheckpointRefusesNonFinite: a checkpoint with a NaN or infinite
// weight or optimizer slot is neither encoded nor saved; the opaque random
// state may hold any bits.
func TestCheckpointRefusesNonFinite(t *testing.T) {
	meta := CheckpointMeta{Model: "linear", Dim: 3, Classes: 2}
	for name, v := range map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)} {
		for _, tensor := range []string{"params", "adam/v"} {
			dir := t.TempDir()
			ck := &Checkpoint{Step: 7, Meta: meta, Tensors: map[string][]float64{"params": {1, 2, 3, 4}, "adam/v": {0, 0, 0, 0}}}
			ck.Tensors[tensor][2] = v
			if _, err := ck.Encode(); !errors.Is(err, ErrNonFinite) {
				t.Errorf("%s in %s: Encode %v, want ErrNonFinite", name, tensor, err)
			}
			if err := SaveCheckpoint(dir, ck, 0); !errors.Is(err, ErrNonFinite) {
				t.Errorf("%s in %s: SaveCheckpoint %v, want ErrNonFinite", name, tensor, err)
			}
			if steps, _ := ListCheckpoints(dir); len(steps) != 0 {
				t.Errorf("%s in %s: checkpoints %v written", name, tensor, steps)
			}
		}
	}
	ck := &Checkpoint{Step: 7, Meta: meta, Tensors: map[string][]float64{"params": {1, 2, 3, 4}, "rng/dropout": {math.NaN(), math.Inf(1)}}}
	if _, err := ck.Encode(); err != nil {
		t.Fatalf("random state with NaN bits: %v", err)
	}
}

func TestNonFinite(t *testing.T) {
	for n := range 11 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(i) - 3.5
		}
		if got := NonFinite(v); got != -1 {
			t.Fatalf("finite %v: %d, want -1", v, got)
		}
		for i := range n {
			for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
				w := slices.Clone(v)
				w[i] = bad
				if n > 1 {
					w[n-1-i] = math.MaxFloat64 // huge but finite
					w[i] = bad
				}
				if got := NonFinite(w); got != i {
					t.Fatalf("%v: %d, want %d", w, got, i)
				}
			}
		}
	}
}

// TestSaveEveryFollowsTheClock checks time-based checkpoints on a fake
// clock that advances 1 s per reading: with SaveEvery 10 s Run reads it
// once at the start and once after each step, so checkpoints land at steps
// 10, 20, 30 and at MaxSteps 35, and a run resumed at 35 keeps the
// interval from its own start.
func TestSaveEveryFollowsTheClock(t *testing.T) {
	d := separable(500, 3)
	dir := t.TempDir()
	cfg := config(dir, 35)
	cfg.SaveSteps, cfg.KeepMax = 0, 0
	cfg.SaveEvery = 10 * time.Second
	var clock time.Time
	cfg.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	var reported []int64
	var stepped int64
	cfg.Stepped = func(s int64, _ float64) { stepped = s }
	if _, err := Run(context.Background(), cfg, d, func(p Progress) error { reported = append(reported, p.Step); return nil }); err != nil {
		t.Fatal(err)
	}
	steps, err := ListCheckpoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{10, 20, 30, 35}; !slices.Equal(steps, want) || !slices.Equal(reported, want) || stepped != 35 {
		t.Fatalf("checkpoints %v, reported %v, last step %d; want %v and 35", steps, reported, stepped, want)
	}
	cfg.MaxSteps = 50
	if _, err := Run(context.Background(), cfg, d, nil); err != nil {
		t.Fatal(err)
	}
	if steps, _ := ListCheckpoints(dir); !slices.Equal(steps, []int64{10, 20, 30, 35, 45, 50}) {
		t.Fatalf("after resuming: checkpoints %v, want 10 20 30 35 45 50", steps)
	}
	cfg.SaveEvery = 0
	if _, err := Run(context.Background(), cfg, d, nil); !errors.Is(err, ErrShape) {
		t.Fatalf("no save interval: %v, want ErrShape", err)
	}
}

// streamDir is a Dir whose objects also stream (a Streamer), counting
// the bytes its readers hand out.
type streamDir struct {
	Dir
	read *int64
}

func (d streamDir) NewReader(_ context.Context, key string) (io.ReadCloser, error) {
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, err
	}
	return countReader{f, d.read}, nil
}

type countReader struct {
	*os.File
	n *int64
}

func (r countReader) Read(p []byte) (int, error) {
	n, err := r.File.Read(p)
	*r.n += int64(n)
	return n, err
}

// TestCheckpointsMeta: Meta returns a checkpoint's meta, reading only
// its head from Objects that stream (a few KiB of a 8 MB checkpoint) and
// the whole object from others; a missing checkpoint matches
// fs.ErrNotExist, a file of another step or not a checkpoint ErrCheckpoint.
func TestCheckpointsMeta(t *testing.T) {
	dir := t.TempDir()
	meta := CheckpointMeta{Model: "dnn_classifier", Dim: 3, Classes: 2, Spec: &ModelSpec{HiddenUnits: []int{8, 4}}}
	ck := &Checkpoint{Step: 7, Meta: meta, Tensors: map[string][]float64{"w": make([]float64, 1<<20)}}
	var read int64
	for _, objs := range []Objects{Dir(dir), streamDir{Dir(dir), &read}} {
		cks := NewCheckpoints(objs, "ckpts")
		if err := cks.Save(context.Background(), ck, 0); err != nil {
			t.Fatal(err)
		}
		got, err := cks.Meta(context.Background(), 7)
		if err != nil || !got.Equal(meta) {
			t.Errorf("%T: meta %+v, %v; want %+v", objs, got, err, meta)
		}
		if _, err := cks.Meta(context.Background(), 8); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%T: missing checkpoint: %v, want fs.ErrNotExist", objs, err)
		}
	}
	if read == 0 || read > 64<<10 {
		t.Errorf("streamed %d bytes of an 8 MB checkpoint, want its head only", read)
	}
	os.WriteFile(filepath.Join(dir, "ckpts", CheckpointName(9)), []byte("{\"not\":\"a checkpoint\"}"), 0o644)
	os.Rename(filepath.Join(dir, "ckpts", CheckpointName(7)), filepath.Join(dir, "ckpts", CheckpointName(10)))
	for _, step := range []int64{9, 10} {
		if _, err := NewCheckpoints(streamDir{Dir(dir), &read}, "ckpts").Meta(context.Background(), step); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("step %d: %v, want ErrCheckpoint", step, err)
		}
	}
}
