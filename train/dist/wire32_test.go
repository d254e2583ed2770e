package dist

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/trainflow/trainflow/train"
)

// runFloat32DNN trains a small float32 DNN with one worker and two
// parameter servers, async, to 60 steps, the worker's variables and
// gradients float64 (wire64) or float32 on the wire, and returns the
// final checkpoint and the bytes the worker's client sent and received.
func runFloat32DNN(t *testing.T, wire64 bool, clipNorm float64, sync bool) (*train.Checkpoint, int64, int64) {
	t.Helper()
	data, _ := trainAndHeldOut()
	meta := train.CheckpointMeta{Model: train.DNNClassifierModel, Dim: 8, Classes: 2, Spec: &train.ModelSpec{HiddenUnits: []int{16}, Dropout: 0.1, Float32: true}}
	const steps = 60
	cl := &cluster{t: t, ckdir: t.TempDir(), view: Cluster{Gen: 1, Addrs: make([]string, 2)}, servers: make([]*Server, 2)}
	replicas := 0
	if sync {
		replicas = 1
	}
	cl.cfg = ShardConfig{Tasks: 2, Workers: 1, Meta: meta, Seed: 3, Optimizer: train.OptimizerConfig{Name: train.AdamOptimizer, LearningRate: 0.05},
		MaxSteps: steps, SaveSteps: 30, Sync: sync, Replicas: replicas}
	for i := range 2 {
		cl.start(i, nil, 1)
	}
	t.Cleanup(func() {
		for _, s := range cl.servers {
			s.Stop()
		}
	})
	m, _ := train.Initial(meta, 3)
	c, err := Dial(context.Background(), cl.resolve, len(m.Params()), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := WorkerConfig{Meta: meta, Seed: 5, BatchSize: 32, ClipNorm: clipNorm, MaxSteps: steps, SaveSteps: 30, KeepMax: 1,
		CheckpointDir: cl.ckdir, wire64: wire64}
	if _, err := RunWorker(context.Background(), cfg, data, c, Hooks{}); err != nil {
		t.Fatal(err)
	}
	ck, err := train.LatestCheckpoint(cl.ckdir)
	if err != nil || ck == nil || ck.Step != steps {
		t.Fatalf("final checkpoint %v: %v", ck, err)
	}
	sent, recv := c.WireBytes()
	return ck, sent, recv
}

// TestFloat32WireIsExact: a worker whose model computes in float32 pulls
// float32 variables and pushes its float32 gradient (with the clipping
// factor the servers apply after widening), and trains to the very
// checkpoint, bit for bit, that the same worker gets with float64 on the
// wire, clipped or not, async or sync; each step's variables and gradient
// take half the bytes.
func TestFloat32WireIsExact(t *testing.T) {
	for _, c := range []struct {
		name string
		clip float64
		sync bool
	}{{"async", 0, false}, {"async clipped", 0.05, false}, {"sync clipped", 0.05, true}} {
		t.Run(c.name, func(t *testing.T) {
			ref, sent64, recv64 := runFloat32DNN(t, true, c.clip, c.sync)
			got, sent32, recv32 := runFloat32DNN(t, false, c.clip, c.sync)
			for name, want := range ref.Tensors {
				v := got.Tensors[name]
				if len(v) != len(want) {
					t.Fatalf("tensor %q: %d values, want %d", name, len(v), len(want))
				}
				for i := range want {
					if math.Float64bits(v[i]) != math.Float64bits(want[i]) {
						t.Fatalf("tensor %q[%d]: %v with float32 on the wire, %v with float64", name, i, v[i], want[i])
					}
				}
			}
			if len(got.Tensors) != len(ref.Tensors) {
				t.Fatalf("tensors %v, want %v", slices.Sorted(maps.Keys(got.Tensors)), slices.Sorted(maps.Keys(ref.Tensors)))
			}
			// 81 variables a step each way: 4 bytes each instead of 8, plus
			// the messages' fixed fields and the chief's float64 cuts.
			if r := float64(sent32) / float64(sent64); r > 0.8 {
				t.Fatalf("sent %d bytes with float32 on the wire, %d with float64 (%.2f)", sent32, sent64, r)
			}
			if r := float64(recv32) / float64(recv64); r > 0.8 {
				t.Fatalf("received %d bytes with float32 on the wire, %d with float64 (%.2f)", recv32, recv64, r)
			}
			t.Logf("bytes sent %d → %d, received %d → %d", sent64, sent32, recv64, recv32)
		})
	}
}

// TestFloat32VectorsRoundTripAcrossSegments: a float32 gradient arrives
// widened and scaled by its clipping factor, float32 variables arrive as
// they left, across frames split into 3-byte segments; bad widths and
// factors are refused.
func TestFloat32VectorsRoundTripAcrossSegments(t *testing.T) {
	segmented := func(m message) mem.BufferSlice {
		bs, err := codec{}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		raw := bs.Materialize()
		var segs mem.BufferSlice
		for i := 0; i < len(raw); i += 3 {
			segs = append(segs, mem.SliceBuffer(raw[i:min(i+3, len(raw))]))
		}
		return segs
	}
	grad := make([]float32, 5000) // more than one widening chunk
	for i := range grad {
		grad[i] = float32(i)*0.25 - 7
	}
	var push pushRequest
	if err := (codec{}).Unmarshal(segmented(&pushRequest{Worker: 1, Cursor: []float64{1, 2}, Clip: 0.5, Grad32: grad}), &push); err != nil {
		t.Fatal(err)
	}
	for i, g := range grad {
		if push.Grad[i] != float64(g)*0.5 {
			t.Fatalf("gradient[%d] %v, want %v", i, push.Grad[i], float64(g)*0.5)
		}
	}
	var pull pullResponse
	pull.Params32 = make([]float32, len(grad))
	if err := (codec{}).Unmarshal(segmented(&pullResponse{Step: 9, Params32: grad}), &pull); err != nil || pull.Step != 9 || !slices.Equal(pull.Params32, grad) {
		t.Fatalf("pull decoded step %d, equal %v, err %v", pull.Step, slices.Equal(pull.Params32, grad), err)
	}
	// A float32 pull decoded as float64 widens; a float64 one into float32 is refused.
	var wide pullResponse
	if err := (codec{}).Unmarshal(segmented(&pullResponse{Params32: grad[:3]}), &wide); err != nil || !slices.Equal(wide.Params, []float64{-7, -6.75, -6.5}) {
		t.Fatalf("float32 pull read as float64: %v, %v", wide.Params, err)
	}
	narrowed := pullResponse{Params32: make([]float32, 3)}
	if err := (codec{}).Unmarshal(segmented(&pullResponse{Params: []float64{1, 2, 3}}), &narrowed); !errors.Is(err, errWire) {
		t.Fatalf("float64 pull read as float32: %v, want errWire", err)
	}
	for _, clip := range []float64{-0.5, 1.5, math.NaN(), math.Inf(1)} {
		if err := (codec{}).Unmarshal(segmented(&pushRequest{Clip: clip, Grad32: grad[:4]}), &pushRequest{}); !errors.Is(err, errWire) {
			t.Fatalf("clipping factor %v: %v, want errWire", clip, err)
		}
	}
}
