package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/internal/idx"
	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

const fashionDir = "/usr/share/datasets/fashion-mnist"

// fashionSubset writes the first nTrain training and nTest test images of
// Fashion-MNIST (gzip images, plain labels) into a new directory and
// returns it with the test split read back.
func fashionSubset(t *testing.T, nTrain, nTest int) (string, *idx.Split) {
	t.Helper()
	if _, err := os.Stat(fashionDir); err != nil {
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist, which .ci/run does): %v", err)
	}
	dir := t.TempDir()
	var test *idx.Split
	for _, c := range []struct {
		split string
		n     int
	}{{"train", nTrain}, {"t10k", nTest}} {
		s, err := idx.ReadSplit(fashionDir, c.split, "dataset-fashion-mnist")
		if err != nil {
			t.Fatal(err)
		}
		s.N, s.Images, s.Labels = c.n, s.Images[:c.n*s.Width], s.Labels[:c.n]
		writeIDXFile(t, filepath.Join(dir, c.split+"-images-idx3-ubyte.gz"), []int{c.n, 28, 28}, s.Images)
		writeIDXFile(t, filepath.Join(dir, c.split+"-labels-idx1-ubyte"), []int{c.n}, s.Labels)
		test = s
	}
	return dir, test
}

func writeIDXFile(t *testing.T, name string, dims []int, data []byte) {
	t.Helper()
	if err := datagen.WriteIDX(name, dims, data); err != nil {
		t.Fatal(err)
	}
}

// predictImages posts test images [0, n) raw (0–255) as V1 instances
// {"image": [784 numbers]} and returns the fraction answered with the
// right class name.
func predictImages(t *testing.T, url string, test *idx.Split, n int, classes []string) float64 {
	t.Helper()
	insts := make([]map[string]any, n)
	for i := range insts {
		px := make([]int, test.Width)
		for j, p := range test.Image(i) {
			px[j] = int(p)
		}
		insts[i] = map[string]any{"image": px}
	}
	correct := 0
	for k, p := range onlineClasses(t, url, insts) {
		if len(p.Probabilities) != 10 {
			t.Fatalf("prediction %+v: want 10 probabilities", p)
		}
		if p.Class == classes[test.Labels[k]] {
			correct++
		}
	}
	return float64(correct) / float64(n)
}

// TestFashionMNISTPreset trains the fashion_mnist preset, typed as in the
// Temporal UI, on a 4000-image subset for 150 steps, single-process and
// with a parameter server and two workers: each job succeeds, exports and
// publishes, and the served model answers V1 requests of raw images with
// class names; the mnist preset on the same files answers digits.
func TestFashionMNISTPreset(t *testing.T) {
	dir, test := fashionSubset(t, 4000, 1000)
	st := testStack(t, t.TempDir())
	for _, c := range []struct {
		id, preset, cluster string
		classes             []string
	}{
		{"fmnist_fast", "fashion_mnist", "", preprocess.FashionMNISTClasses},
		{"fmnist_dist", "fashion_mnist", `,"cluster":{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1}`, preprocess.FashionMNISTClasses},
		// The mnist preset on the same files: the classes are digits.
		{"mnist_fast", "mnist", "", preprocess.MNISTClasses},
	} {
		t.Run(c.id, func(t *testing.T) {
			input := fmt.Sprintf(`{"job_id":%q,"preset":%q,"model_name":%q,"data":{"dir":%q},"train":{"max_steps":150}%s}`, c.id, c.preset, c.id, dir, c.cluster)
			res, err := waitJob(t, startUIStyle(t, st.Client, c.id, input))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("result: step %d, rows %d/%d, eval accuracy %.4f", res.GlobalStep, res.TrainRows, res.EvalRows, res.Metrics.Accuracy)
			if res.Model != c.id || res.Version != 1 || res.GlobalStep != 150 || res.TrainRows != 4000 || res.EvalRows != 1000 || res.Export == "" {
				t.Fatalf("result %+v, want model %s version 1 after 150 steps on 4000/1000 rows, exported", res, c.id)
			}
			if ev, _ := os.ReadFile(filepath.Join(res.JobDir, "events.jsonl")); (c.cluster != "") != bytes.Contains(ev, []byte(`"ps_start"`)) {
				t.Errorf("cluster %q: events.jsonl has ps_start: %v, want %v", c.cluster, !(c.cluster != ""), c.cluster != "")
			}
			if res.Metrics.Accuracy < 0.6 {
				t.Errorf("eval accuracy %.4f after 150 steps, want ≥ 0.6", res.Metrics.Accuracy)
			}
			url := fmt.Sprintf("http://%s/v1/models/%s:predict", st.HTTPAddr, c.id)
			acc := predictImages(t, url, test, 300, c.classes)
			t.Logf("served accuracy on 300 test images: %.4f", acc)
			if acc < 0.6 {
				t.Errorf("served accuracy %.4f, want ≥ 0.6", acc)
			}
			if c.id != "mnist_fast" {
				// Batch prediction of the test images the evaluator saw
				// gives the evaluator's accuracy.
				acc := batchImageAccuracy(t, st, c.id+"_pred", res.Export, filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), test.Labels, c.classes)
				if want := exportAccuracy(t, res); acc != want {
					t.Errorf("batch prediction of the %d test images: accuracy %.4f, the evaluator's of the exported checkpoint %.4f", len(test.Labels), acc, want)
				}
			}
			code, b := postJSON(t, url, `{"instances":[{"image":[0,1,2]}]}`)
			if code != http.StatusBadRequest || !strings.Contains(string(b), "instances[0].image") {
				t.Errorf("short image: %d %s, want 400 naming instances[0].image", code, b)
			}
		})
	}
}

// TestFashionMNISTPresetFullRun is the bar: {"job_id": "fmnist_1",
// "preset": "fashion_mnist"} on the whole of Fashion-MNIST in its default
// directory, 5 epochs, reaches ≥ 0.865 test accuracy (the evaluator's, on
// the 10,000 test images).
func TestFashionMNISTPresetFullRun(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 5 epochs on all 60,000 Fashion-MNIST images (about a minute); TestFashionMNISTPreset covers the preset fast")
	}
	if _, err := os.Stat(fashionDir); err != nil {
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist, which .ci/run does): %v", err)
	}
	st := testStack(t, t.TempDir())
	t0 := time.Now()
	run := startUIStyle(t, st.Client, "fmnist_1", `{"job_id":"fmnist_1","preset":"fashion_mnist"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var res workflows.JobResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("fashion_mnist 5 epochs: %s from submission, %d steps, %d/%d rows, eval accuracy %.4f", time.Since(t0).Round(time.Second), res.GlobalStep, res.TrainRows, res.EvalRows, res.Metrics.Accuracy)
	if res.TrainRows != 60000 || res.EvalRows != 10000 || res.GlobalStep != 5*469 {
		t.Fatalf("result %+v, want 60000/10000 rows and 5×469 steps", res)
	}
	if res.Metrics.Accuracy < 0.865 {
		t.Fatalf("test accuracy %.4f after 5 epochs, want ≥ 0.865", res.Metrics.Accuracy)
	}
	// Batch prediction of the 10,000 test images gives the evaluator's
	// accuracy.
	test, err := idx.ReadSplit(fashionDir, "t10k", "dataset-fashion-mnist")
	if err != nil {
		t.Fatal(err)
	}
	acc := batchImageAccuracy(t, st, "fmnist_1_pred", res.Export, filepath.Join(fashionDir, "t10k-images-idx3-ubyte.gz"), test.Labels, preprocess.FashionMNISTClasses)
	t.Logf("batch prediction of the test set: accuracy %.4f", acc)
	if want := exportAccuracy(t, res); acc != want {
		t.Errorf("batch prediction of the 10,000 test images: accuracy %.4f, the evaluator's of the exported checkpoint %.4f", acc, want)
	}
}

// TestFashionMNISTCNNPresetFullRun is the layer stacks' bar: {"job_id":
// "fcnn_1", "preset": "fashion_mnist_cnn"} (FashionCNN, 5 epochs at batch
// 64, Adam 0.002 on a cosine schedule) on the whole of Fashion-MNIST
// reaches ≥ 0.91 test accuracy (the evaluator's, on the 10,000 test
// images), and batch prediction of those images agrees with it. It takes
// minutes of both cores, so -short (the race stage) leaves it out; the
// unit stage runs it.
func TestFashionMNISTCNNPresetFullRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: trains a CNN for 5 epochs on all 60,000 Fashion-MNIST images (minutes of CPU); TestSequentialCNNJobServes (activities) covers the path fast")
	}
	if _, err := os.Stat(fashionDir); err != nil {
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist, which .ci/run does): %v", err)
	}
	st := testStack(t, t.TempDir())
	t0 := time.Now()
	run := startUIStyle(t, st.Client, "fcnn_1", `{"job_id":"fcnn_1","preset":"fashion_mnist_cnn"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	var res workflows.JobResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("fashion_mnist_cnn 5 epochs: %s from submission, %d steps, %d/%d rows, eval accuracy %.4f", time.Since(t0).Round(time.Second), res.GlobalStep, res.TrainRows, res.EvalRows, res.Metrics.Accuracy)
	if res.TrainRows != 60000 || res.EvalRows != 10000 || res.GlobalStep != 5*938 {
		t.Fatalf("result %+v, want 60000/10000 rows and 5×938 steps", res)
	}
	if res.Metrics.Accuracy < 0.91 {
		t.Fatalf("test accuracy %.4f after 5 epochs, want ≥ 0.91", res.Metrics.Accuracy)
	}
	test, err := idx.ReadSplit(fashionDir, "t10k", "dataset-fashion-mnist")
	if err != nil {
		t.Fatal(err)
	}
	acc := batchImageAccuracy(t, st, "fcnn_1_pred", res.Export, filepath.Join(fashionDir, "t10k-images-idx3-ubyte.gz"), test.Labels, preprocess.FashionMNISTClasses)
	if want := exportAccuracy(t, res); acc != want {
		t.Errorf("batch prediction of the 10,000 test images: accuracy %.4f, the evaluator's of the exported checkpoint %.4f", acc, want)
	}
}

// exportAccuracy is the evaluator's accuracy on the checkpoint res
// exported (export/<exporter>/<step>): the best export need not be the
// last checkpoint, whose metrics res carries (with a cosine schedule the
// last steps barely move the weights, and an earlier one may score an
// image more).
func exportAccuracy(t *testing.T, res workflows.JobResult) float64 {
	t.Helper()
	step, err := strconv.ParseInt(filepath.Base(res.Export), 10, 64)
	if err != nil {
		t.Fatalf("export %q does not end in a step: %v", res.Export, err)
	}
	f, err := os.Open(filepath.Join(res.JobDir, jobdir.EvalMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	acc := -1.0
	if _, err := jobdir.ScanEvals(f, func(e jobdir.EvalRecord) {
		if jobdir.IsDefaultEval(e.Name) && e.GlobalStep == step {
			acc = e.Metrics.Accuracy
		}
	}); err != nil {
		t.Fatal(err)
	}
	if acc < 0 {
		t.Fatalf("no evaluation of step %d (the export %s) in %s", step, res.Export, jobdir.EvalMetricsFile)
	}
	return acc
}

// TestImagePresetWithoutData: no dataset where the preset looks fails the
// job at once (not retried), naming the path and where to get the data; a
// data.dir outside the worker's roots is refused.
func TestImagePresetWithoutData(t *testing.T) {
	st := testStack(t, t.TempDir())
	empty := t.TempDir()
	if _, err := os.Stat(jobspec.ImageDataDirs[jobspec.PresetMNIST]); err == nil {
		t.Fatalf("%s exists: this test needs MNIST absent from its default directory", jobspec.ImageDataDirs[jobspec.PresetMNIST])
	}
	for _, c := range []struct {
		id, input string
		want      []string
	}{
		{"mnist_missing", `{"job_id":"mnist_missing","preset":"mnist"}`,
			[]string{"/usr/share/datasets/mnist", "train-images-idx3-ubyte", "yann.lecun.com/exdb/mnist", "data.dir"}},
		{"fmnist_missing", fmt.Sprintf(`{"job_id":"fmnist_missing","preset":"fashion_mnist","data":{"dir":%q}}`, empty),
			[]string{empty, "train-images-idx3-ubyte", "apt-get install dataset-fashion-mnist"}},
		{"fmnist_outside", `{"job_id":"fmnist_outside","preset":"fashion_mnist","data":{"dir":"/etc"}}`,
			[]string{`data.dir "/etc"`, "outside", "--read-roots"}},
	} {
		t0 := time.Now()
		_, err := waitJob(t, startUIStyle(t, st.Client, c.id, c.input))
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != workflows.ErrTypeInvalidSpec {
			t.Fatalf("%s: got %v, want an InvalidSpec failure", c.id, err)
		}
		for _, w := range c.want {
			if !strings.Contains(ae.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.id, ae.Error(), w)
			}
		}
		t.Logf("%s failed in %s: %s", c.id, time.Since(t0).Round(time.Millisecond), ae.Error())
	}
}
