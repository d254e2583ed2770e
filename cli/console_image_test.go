package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// imageModel is a model of an image preset that consoleImageModel
// trains and tries: job (and model) id, preset, steps, the classes its
// predictions name, and the model type its bundle must hold.
type imageModel struct {
	id, preset string
	steps      int
	classes    []string
	model      string
}

// consoleImageModels are the image presets the console's canvas is
// checked with: the MLP and both layer stacks (input_shape [28, 28, 1];
// mnist_cnn reads the Fashion-MNIST subset, its classes the labels "0" …
// "9").
var consoleImageModels = []imageModel{
	{"console_fmnist", jobspec.PresetFashionMNIST, 60, preprocess.FashionMNISTClasses, train.DNNClassifierModel},
	{"console_fmnist_cnn", jobspec.PresetFashionMNISTCNN, 15, preprocess.FashionMNISTClasses, train.SequentialClassifierModel},
	{"console_mnist_cnn", jobspec.PresetMNISTCNN, 15, preprocess.MNISTClasses, train.SequentialClassifierModel},
}

// consoleImageModel trains a small model of preset im on st and checks
// its console page: the try-it form has a 28×28 canvas, a textarea and
// the same-origin script (the page's CSP allows scripts from 'self' only,
// no inline script); the form answers for a test image's 784 numbers;
// and in headless Chromium, drawing on the canvas fills the textarea and
// Predict shows one of the model's classes.
func consoleImageModel(t *testing.T, st *stack, base string, im imageModel) {
	dir, test := fashionSubset(t, 2000, 200)
	id := im.id
	spec := fmt.Sprintf(`{"job_id":%q,"preset":%q,"model_name":%q,"data":{"dir":%q},"train":{"max_steps":%d}}`, id, im.preset, id, dir, im.steps)
	res, err := waitJob(t, startUIStyle(t, st.Client, id, spec))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := bundle.ReadDir(res.Export, nil); err != nil || b.Meta.Model.Model != im.model {
		t.Fatalf("the exported bundle %s (%v) is not a %s", res.Export, err, im.model)
	}
	resp, err := http.Get(base + "/console/models/" + id)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self';") || strings.Contains(csp, "unsafe-inline';  script") || strings.Contains(csp, "script-src 'self' 'unsafe") {
		t.Errorf("CSP %q: want script-src 'self' only", csp)
	}
	code, page := get(t, base, "/console/models/"+id)
	for _, want := range []string{`<canvas id="canvas_image" class="draw" width="28" height="28" data-target="f_image">`,
		`<textarea id="f_image" name="f_image"`, `<script src="/console/static/draw.js" defer></script>`} {
		if code != http.StatusOK || !strings.Contains(page, want) {
			t.Fatalf("model page (%d) lacks %s:\n%s", code, want, section(page, "main"))
		}
	}
	if strings.Count(page, "<script") != 1 {
		t.Errorf("model page has %d script tags, want the one static script", strings.Count(page, "<script"))
	}
	js, err := http.Get(base + "/console/static/draw.js")
	if err != nil {
		t.Fatal(err)
	}
	js.Body.Close()
	if js.StatusCode != http.StatusOK || !strings.HasPrefix(js.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("draw.js: %d %s", js.StatusCode, js.Header.Get("Content-Type"))
	}

	// Without a browser: the textarea's 784 numbers, as a person pastes them.
	px := make([]string, test.Width)
	for i, p := range test.Image(0) {
		px[i] = strconv.Itoa(int(p))
	}
	form := url.Values{"version": {"1"}, "f_image": {strings.Join(px, ", ")}}
	r, err := http.PostForm(base+"/console/models/"+id, form)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	r.Body.Close()
	ans := section(b.String(), "answer")
	if r.StatusCode != http.StatusOK || !strings.Contains(ans, `id="prediction"`) || strings.Count(ans, "<tr>") != 11 {
		t.Errorf("try-it with pasted numbers: %d, want a prediction and 10 probabilities:\n%s", r.StatusCode, ans)
	}
	form.Set("f_image", "1 2 3")
	r, err = http.PostForm(base+"/console/models/"+id, form)
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	for {
		n, err := r.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	r.Body.Close()
	if ans := section(b.String(), "answer"); !strings.Contains(ans, `id="predict-error"`) || !strings.Contains(ans, "image") {
		t.Errorf("try-it with 3 numbers: want an error naming image:\n%s", ans)
	}

	t.Run("chromium", func(t *testing.T) {
		ctx := browserContext(t)
		var box []float64
		var filled string
		var prediction string
		err := chromedp.Run(ctx,
			chromedp.Navigate(base+"/console/models/"+id),
			chromedp.WaitVisible(`canvas.draw`, chromedp.ByQuery),
			chromedp.Evaluate(`(() => { const r = document.querySelector("canvas.draw").getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`, &box),
		)
		if err != nil {
			t.Fatal(err)
		}
		// A trouser: two vertical strokes.
		var strokes []chromedp.Action
		for _, col := range []float64{0.38, 0.62} {
			x := box[0] + col*box[2]
			strokes = append(strokes, chromedp.MouseEvent(input.MousePressed, x, box[1]+0.12*box[3], chromedp.ButtonLeft))
			for k := 1; k <= 20; k++ {
				strokes = append(strokes, chromedp.MouseEvent(input.MouseMoved, x, box[1]+(0.12+0.04*float64(k))*box[3], chromedp.ButtonLeft))
			}
			strokes = append(strokes, chromedp.MouseEvent(input.MouseReleased, x, box[1]+0.92*box[3], chromedp.ButtonLeft))
		}
		if err := chromedp.Run(ctx, append(strokes, chromedp.Value(`#f_image`, &filled, chromedp.ByQuery))...); err != nil {
			t.Fatal(err)
		}
		vals := strings.Fields(filled)
		lit := 0
		for _, v := range vals {
			if v != "0" {
				lit++
			}
		}
		if len(vals) != 784 || lit < 40 {
			t.Fatalf("after drawing, the textarea holds %d numbers, %d of them non-zero; want 784 with a stroke's worth lit", len(vals), lit)
		}
		shots := os.Getenv("TRAINFLOW_SCREENSHOTS")
		var png []byte
		err = chromedp.Run(ctx,
			chromedp.Click(`#predict`, chromedp.ByQuery),
			chromedp.WaitVisible(`#prediction`, chromedp.ByQuery),
			chromedp.Text(`#prediction`, &prediction, chromedp.ByQuery),
			chromedp.ActionFunc(func(ctx context.Context) error {
				if shots == "" {
					return nil
				}
				return chromedp.FullScreenshot(&png, 100).Do(ctx)
			}),
		)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(im.classes, prediction) {
			t.Errorf("prediction for the drawing: %q, want one of %q", prediction, im.classes)
		}
		t.Logf("%s: the drawn trouser is predicted %q", im.preset, prediction)
		if shots != "" && im.preset == jobspec.PresetFashionMNIST {
			os.WriteFile(filepath.Join(shots, "console-image.png"), png, 0o644)
		}
	})
}
