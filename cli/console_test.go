package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/workflows"
)

// get fetches a console page from the stack's HTTP server.
func get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// count counts the matches of a regular expression in s.
func count(s, re string) int { return len(regexp.MustCompile(re).FindAllStringIndex(s, -1)) }

// section returns the part of page from the element with id to the
// end of its table (or the page).
func section(page, id string) string {
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		return ""
	}
	s := page[i:]
	if j := strings.Index(s, "</table>"); j >= 0 {
		s = s[:j]
	}
	return s
}

// charts returns, per chart title, its series count and its SVG.
func charts(t *testing.T, page string) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	re := regexp.MustCompile(`(?s)<figure class="chart" data-series="(\d+)" data-title="([^"]+)">(.*?)</figure>`)
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		out[m[2]] = [2]string{m[1], m[3]}
	}
	return out
}

// TestConsole runs a BASIC job and a distributed job with a malformed
// row on the dev stack, then reads the console's pages over HTTP: the
// jobs list (rows, filters, Temporal UI links), each job's charts (SVG
// with one legend entry per series) and tables, the model page and its
// try-it form against the predict API, and bad URLs. Its subtest drives
// headless Chromium through the same pages.
func TestConsole(t *testing.T) {
	home := t.TempDir()
	st := testStack(t, home, func(c *stackConfig) { c.UIAddr = "127.0.0.1:0" })
	base := "http://" + st.HTTPAddr

	// Data for the distributed job: generated rows and one malformed line.
	data := t.TempDir()
	var train bytes.Buffer
	if err := datagen.Census(&train, 2000, 7, false); err != nil {
		t.Fatal(err)
	}
	train.WriteString("this line, is not a census row\n")
	var eval bytes.Buffer
	if err := datagen.Census(&eval, 500, 8, true); err != nil {
		t.Fatal(err)
	}
	trainPath, evalPath := filepath.Join(data, "train.csv"), filepath.Join(data, "eval.csv")
	os.WriteFile(trainPath, train.Bytes(), 0o644)
	os.WriteFile(evalPath, eval.Bytes(), 0o644)

	basic := startUIStyle(t, st.Client, "console_basic", jobInput("console_basic", `{"generated_rows":2000}`, `{}`, 600, 200))
	dist := startUIStyle(t, st.Client, "console_dist", jobInput("console_dist", fmt.Sprintf(`{"train":[%q],"eval":[%q]}`, trainPath, evalPath),
		`{"scale_tier":"CUSTOM","worker_count":1,"parameter_server_count":1,"update":"async"}`, 200, 100))
	resBasic, err := waitJob(t, basic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitJob(t, dist); err != nil {
		t.Fatal(err)
	}

	t.Run("jobs", func(t *testing.T) {
		var page string
		deadline := time.Now().Add(20 * time.Second) // visibility lags the close
		for {
			var code int
			code, page = get(t, base, "/console/jobs")
			if code != http.StatusOK {
				t.Fatalf("GET /console/jobs: %d\n%s", code, page)
			}
			if strings.Count(page, `class="status SUCCEEDED"`) == 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if n := count(page, `<tr class="job">`); n != 2 {
			t.Fatalf("jobs list has %d rows, want 2:\n%s", n, page)
		}
		for _, id := range []string{"console_basic", "console_dist"} {
			if !strings.Contains(page, `href="/console/jobs/`+id+`"`) {
				t.Errorf("jobs list has no link to %s", id)
			}
			if ui := st.Temporal.UIURL() + "/namespaces/default/workflows/" + id; !strings.Contains(page, `href="`+ui+`"`) {
				t.Errorf("jobs list has no Temporal UI link %s", ui)
			}
		}
		for q, want := range map[string]int{"?state=SUCCEEDED": 2, "?state=failed": 0, "?model=census": 2, "?state=RUNNING&model=census": 0, "?model=other": 0} {
			code, p := get(t, base, "/console/jobs"+q)
			if n := count(p, `<tr class="job">`); code != http.StatusOK || n != want {
				t.Errorf("GET /console/jobs%s: %d with %d rows, want 200 with %d", q, code, n, want)
			}
		}
		for _, q := range []string{"?state=BOGUS", "?model=" + url.QueryEscape("x' OR 1=1")} {
			if code, _ := get(t, base, "/console/jobs"+q); code != http.StatusBadRequest {
				t.Errorf("GET /console/jobs%s: %d, want 400", q, code)
			}
		}
	})

	t.Run("basic job", func(t *testing.T) {
		code, page := get(t, base, "/console/jobs/console_basic")
		if code != http.StatusOK {
			t.Fatalf("GET job: %d\n%s", code, page)
		}
		if strings.Contains(page, `http-equiv="refresh"`) {
			t.Error("a finished job's page refreshes itself")
		}
		ch := charts(t, page)
		for title, want := range map[string][]string{
			"Loss and evaluation metrics": {"loss (train)", "log_loss (eval)", "accuracy (eval)", "auc (eval)", "checkpoint", "export"},
			"Training throughput":         {"examples/s (train)", "checkpoint"},
		} {
			c, ok := ch[title]
			if !ok {
				t.Errorf("no chart %q; charts: %v", title, len(ch))
				continue
			}
			if c[0] != fmt.Sprint(len(want)) {
				t.Errorf("chart %q has %s series, want %d", title, c[0], len(want))
			}
			if !strings.HasPrefix(c[1], "<svg") {
				t.Errorf("chart %q is not inline SVG: %.60q", title, c[1])
			}
			for _, s := range want { // legend entries are SVG text
				if !strings.Contains(c[1], ">"+s+"</text>") {
					t.Errorf("chart %q: SVG has no legend entry %q", title, s)
				}
			}
			if n := count(c[1], `<path d="M`); n < len(want) {
				t.Errorf("chart %q: %d paths, want at least one per series (%d)", title, n, len(want))
			}
		}
		// Tables against the job directory's files.
		evs, err := os.ReadFile(filepath.Join(resBasic.JobDir, "eval", "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := count(section(page, "evals"), "<tr><td"), bytes.Count(evs, []byte("\n")); got != want || want < 1 {
			t.Errorf("evaluations table has %d rows, metrics.jsonl %d lines", got, want)
		}
		if got := count(section(page, "events"), `<tr class="event"><td>[^<]+</td><td>checkpoint</td>`); got != 3 {
			t.Errorf("events table has %d checkpoint rows, want 3 (steps 200, 400, 600)", got)
		}
		if !strings.Contains(page, `id="bad">no bad records`) {
			t.Error("a job without bad records does not say so")
		}
		if !strings.Contains(page, `href="/console/models/census"`) {
			t.Error("job page does not link its model")
		}
	})

	t.Run("distributed job", func(t *testing.T) {
		code, page := get(t, base, "/console/jobs/console_dist")
		if code != http.StatusOK {
			t.Fatalf("GET job: %d\n%s", code, page)
		}
		roles := section(page, "roles")
		for _, r := range []string{"chief", "worker 1", "ps 0"} {
			if !regexp.MustCompile(`<tr class="role"><td>` + r + `</td><td class="n">1</td><td class="n">0</td>`).MatchString(roles) {
				t.Errorf("roles table has no row %q started once, never restarted:\n%s", r, roles)
			}
		}
		if n := count(roles, `<tr class="role">`); n != 3 {
			t.Errorf("roles table has %d rows, want 3", n)
		}
		bad := section(page, "bad")
		if n := count(bad, `<tr><td>[a-z_ ]+</td><td class="n">1</td></tr>`); n != 1 {
			t.Errorf("bad-record table: %d reasons with one row, want 1:\n%s", n, bad)
		}
		if c, ok := charts(t, page)["Loss and evaluation metrics"]; !ok || c[0] == "0" {
			t.Error("distributed job has no loss chart")
		}
	})

	t.Run("model", func(t *testing.T) {
		code, page := get(t, base, "/console/models")
		if code != http.StatusOK || count(page, `<tr class="model">`) != 1 || !strings.Contains(page, `href="/console/models/census"`) {
			t.Fatalf("models page: %d\n%s", code, page)
		}
		code, page = get(t, base, "/console/models/census")
		if code != http.StatusOK {
			t.Fatalf("GET model: %d\n%s", code, page)
		}
		if n := count(section(page, "versions"), `<tr class="version">`); n != 2 {
			t.Errorf("versions table has %d rows, want 2 (one per job)", n)
		}
		if !strings.Contains(section(page, "versions"), "<strong>default</strong>") {
			t.Error("versions table marks no default")
		}
		sv, err := st.Registry.Get("census", 0)
		if err != nil {
			t.Fatal(err)
		}
		sig := sv.Transform.Signature()
		if n := count(section(page, "signature"), `<tr class="input">`); n != len(sig) {
			t.Errorf("signature table has %d rows, want %d", n, len(sig))
		}
		form := url.Values{"version": {fmt.Sprint(sv.Version)}}
		inst := map[string]any{}
		for _, in := range sig {
			m := regexp.MustCompile(`name="f_` + in.Name + `"[^>]* value="([^"]*)"`).FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("try-it form has no field %s", in.Name)
			}
			form.Set("f_"+in.Name, m[1])
			inst[in.Name] = m[1]
			if in.Type == "number" {
				var f float64
				fmt.Sscan(m[1], &f)
				inst[in.Name] = f
			}
		}
		form.Set("f_age", "52")
		inst["age"] = 52.0
		resp, err := http.PostForm(base+"/console/models/census", form)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`id="prediction">([^<]+)<`).FindStringSubmatch(string(b))
		if resp.StatusCode != http.StatusOK || m == nil {
			t.Fatalf("try-it: %d, no prediction:\n%s", resp.StatusCode, b)
		}
		body, _ := json.Marshal(map[string]any{"instances": []any{inst}})
		_, api := postJSON(t, fmt.Sprintf("%s/v1/models/census/versions/%d:predict", base, sv.Version), string(body))
		var ans struct{ Predictions []struct{ Class string } }
		if err := json.Unmarshal(api, &ans); err != nil || len(ans.Predictions) != 1 {
			t.Fatalf("predict API: %s", api)
		}
		if got := htmlUnescape(m[1]); got != ans.Predictions[0].Class {
			t.Errorf("try-it shows %q, the predict API answers %q", got, ans.Predictions[0].Class)
		}
		// A typo in a number reaches the API, which names the field.
		form.Set("f_age", "fifty")
		resp, err = http.PostForm(base+"/console/models/census", form)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !regexp.MustCompile(`id="predict-error">the predict API answered 400: [^<]*age`).Match(b) {
			t.Errorf("try-it with age=fifty shows no 400 naming age:\n%s", section(string(b), "answer"))
		}
	})

	t.Run("bad URLs", func(t *testing.T) {
		for path, want := range map[string]int{
			"/console/jobs/no_such_job":                        http.StatusNotFound,
			"/console/jobs/" + url.PathEscape("../etc/passwd"): http.StatusBadRequest,
			"/console/jobs/" + url.PathEscape("<script>x"):     http.StatusBadRequest,
			"/console/models/" + url.PathEscape("<b>x</b>"):    http.StatusBadRequest,
			"/console/models/nope":                             http.StatusNotFound,
			"/console/models/census?version=x":                 http.StatusBadRequest,
			"/console/models/census?version=99":                http.StatusNotFound,
		} {
			code, page := get(t, base, path)
			if code != want {
				t.Errorf("GET %s: %d, want %d", path, code, want)
			}
			if strings.Contains(page, "<script>") || strings.Contains(page, "<b>x</b>") {
				t.Errorf("GET %s: page holds the URL's markup unescaped", path)
			}
		}
	})

	t.Run("serve", func(t *testing.T) {
		// `trainflow serve --auth-token-file` over the same models and
		// Temporal: its console lists the same jobs and models to clients
		// with the token, and the try-it form passes the token on.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		token := "console-test-token-0123456789"
		tokenFile := filepath.Join(t.TempDir(), "token")
		os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
		ctx, cancel := context.WithCancel(context.Background())
		var logs bytes.Buffer
		served := make(chan error, 1)
		go func() {
			served <- runServe(ctx, nil, withStackCreds([]string{"--models", filepath.Join(home, "models"), "--http", addr, "--log-level", "warn", "--auth-token-file", tokenFile,
				"--temporal", st.Temporal.FrontendAddr(), "--namespace", st.Temporal.Namespace(), "--temporal-ui", "http://ui.example",
				"--console-roots", filepath.Join(home, "jobs"), "--console-page-bytes", "4MiB"}), &logs)
		}()
		defer func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("serve: %v\n%s", err, logs.String())
			}
		}()
		do := func(method, path, auth string, form url.Values) (int, string) {
			req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(form.Encode()))
			if form != nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if auth != "" {
				req.Header.Set("Authorization", "Bearer "+auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, ""
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		var page string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, page = do("GET", "/console/jobs", token, nil); count(page, `<tr class="job">`) == 2 {
				break
			}
		}
		if n := count(page, `<tr class="job">`); n != 2 || !strings.Contains(page, `href="http://ui.example/namespaces/default/workflows/console_dist"`) {
			t.Errorf("serve's jobs page has %d rows (want 2) or no Temporal UI link:\n%s", n, page)
		}
		if code, page := do("GET", "/console/models/census", token, nil); code != http.StatusOK || count(page, `<tr class="version">`) != 2 {
			t.Errorf("serve's model page: %d\n%s", code, page)
		}
		// The job page reads the job directory inside --console-roots.
		if code, page := do("GET", "/console/jobs/console_basic", token, nil); code != http.StatusOK || charts(t, page)["Loss and evaluation metrics"][0] == "" {
			t.Errorf("serve's job page: %d, no loss chart:\n%s", code, page)
		}
		if code, _ := do("GET", "/console/jobs", "", nil); code != http.StatusUnauthorized {
			t.Errorf("serve's console without the token: %d, want 401", code)
		}
		if code, page := do("POST", "/console/models/census", token, url.Values{"version": {"1"}, "f_age": {"40"}, "f_education_num": {"10"},
			"f_capital_gain": {"0"}, "f_capital_loss": {"0"}, "f_hours_per_week": {"40"}}); code != http.StatusOK || !strings.Contains(page, `id="prediction"`) {
			t.Errorf("serve's try-it with the token: %d, no prediction:\n%s", code, section(page, "answer"))
		}
	})

	t.Run("chromium", func(t *testing.T) { browseConsole(t, base, "console_dist") })

	for _, im := range consoleImageModels {
		t.Run("image model/"+im.preset, func(t *testing.T) { consoleImageModel(t, st, base, im) })
	}

	t.Run("tuning job", func(t *testing.T) {
		// A tuning job's page charts the objective per trial and the best
		// so far, and lists its trials, each linked to its own page.
		id := "console_hp"
		var payload map[string]any
		json.Unmarshal([]byte(`{"job_id":"console_hp","preset":"census","data":{"generated_rows":600,"train_shards":2,"eval_shards":1},
		  "train":{"max_steps":40,"save_checkpoints_steps":20},"eval_spec":{"throttle_secs":0},
		  "tuning":{"max_trials":3,"max_parallel_trials":3,"algorithm":"RANDOM_SEARCH","seed":7,
		    "params":[{"parameter_name":"model.learning_rate","type":"DOUBLE","min_value":0.0001,"max_value":0.3,"scale_type":"UNIT_LOG_SCALE"}]}}`), &payload)
		run, err := st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.HyperparameterTuningJobName, payload)
		if err != nil {
			t.Fatal(err)
		}
		res, err := waitJob(t, run)
		if err != nil || res.Tuning == nil {
			t.Fatalf("tuning job: %v", err)
		}
		code, page := get(t, base, "/console/jobs/"+id)
		if code != http.StatusOK {
			t.Fatalf("GET tuning job: %d\n%s", code, page)
		}
		c, ok := charts(t, page)["Objective per trial"]
		if !ok || c[0] != "2" || !strings.Contains(c[1], ">accuracy (trial)</text>") || !strings.Contains(c[1], ">best so far</text>") {
			t.Errorf("tuning job's page has no objective chart with 2 series")
		}
		trials := section(page, "trials")
		if n := count(trials, `<tr class="trial">`); n != len(res.Tuning.Trials) || n != 3 {
			t.Errorf("trials table has %d rows, want %d", n, len(res.Tuning.Trials))
		}
		if !strings.Contains(trials, `href="/console/jobs/console_hp_trial_1"`) {
			t.Error("trials table does not link trial 1's page")
		}
		if code, _ := get(t, base, "/console/jobs/console_hp_trial_1"); code != http.StatusOK {
			t.Errorf("trial 1's page: %d", code)
		}
		if dir := os.Getenv("TRAINFLOW_SCREENSHOTS"); dir != "" {
			screenshot(t, base+"/console/jobs/"+id, filepath.Join(dir, "console-tuning.png"))
		}
	})

	t.Run("hostile carry", func(t *testing.T) {
		// A raw client starts TrainingJobs whose second argument (the
		// continue-as-new carry) names the basic job's directory, a path
		// outside every root, and an object store at the attacker's
		// endpoint. The runs are refused; their pages show none of it: no
		// victim's curves, no directory created, no request sent.
		var hits atomic.Int64
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
		defer evil.Close()
		t.Setenv("AWS_ACCESS_KEY_ID", "AKIACONSOLETEST") // a server with credentials signs what it sends
		t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
		outside := filepath.Join(t.TempDir(), "made", "by", "a", "view")
		for i, dir := range []string{resBasic.JobDir, "file://" + outside, "s3://bucket/jobs/console_basic?endpoint=" + evil.URL + "&region=us-east-1&use_path_style=true&disable_https=true"} {
			id := fmt.Sprintf("console_carry_%d", i)
			var spec map[string]any
			json.Unmarshal([]byte(jobInput(id, `{"generated_rows":2000}`, `{}`, 600, 200)), &spec)
			carry := workflows.Carry{Prep: workflows.PrepareResult{JobDir: dir}}
			run, err := st.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.TrainingJobName, spec, carry)
			if err != nil {
				t.Fatal(err)
			}
			run.Get(context.Background(), nil) // refused or not, the page must not open dir
			code, page := get(t, base, "/console/jobs/"+id)
			if code != http.StatusOK || strings.Contains(page, `<figure class="chart"`) || strings.Contains(page, `id="evals"`) {
				t.Errorf("%s (carry %s): %d, shows a job directory's curves or evaluations", id, dir, code)
			}
		}
		if _, err := os.Stat(strings.TrimSuffix(outside, "/by/a/view")); err == nil {
			t.Error("a page view created the carried directory")
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the carried endpoint got %d requests", n)
		}
	})

	t.Run("running job", func(t *testing.T) {
		// A running job's page shows its progress and reloads itself; so
		// does the jobs list while it holds a running job.
		id := "console_running"
		startUIStyle(t, st.Client, id, jobInput(id, `{"generated_rows":2000}`, `{}`, 10_000_000, 1000))
		defer st.Client.CancelWorkflow(context.Background(), id, "")
		var page string
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, page = get(t, base, "/console/jobs/"+id); strings.Contains(page, "TRAINING") && strings.Contains(page, "checkpoint") {
				break
			}
		}
		if !strings.Contains(page, `<meta http-equiv="refresh" content="5">`) || !regexp.MustCompile(`step \d+ / 10000000`).MatchString(page) {
			t.Fatalf("running job's page has no refresh or no progress:\n%s", page)
		}
		if c, ok := charts(t, page)["Loss and evaluation metrics"]; !ok || !strings.Contains(c[1], ">loss (train)</text>") {
			t.Errorf("running job's page has no training curve yet")
		}
		if _, page = get(t, base, "/console/jobs?state=RUNNING"); !strings.Contains(page, `http-equiv="refresh"`) || count(page, `<tr class="job">`) != 1 {
			t.Errorf("jobs list filtered on RUNNING: want one row and a refresh:\n%s", page)
		}
	})
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&gt;", ">", "&lt;", "<", "&amp;", "&", "&#34;", `"`, "&#39;", "'").Replace(s)
}

// chromium returns the path of a Chromium binary, or skips t.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")
	return ""
}

// browserContext starts headless Chromium for t.
func browserContext(t *testing.T) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1100, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// screenshot saves a PNG of the page at url.
func screenshot(t *testing.T, url, file string) {
	var png []byte
	if err := chromedp.Run(browserContext(t), chromedp.Navigate(url), chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// browseConsole drives headless Chromium through jobs → job → model →
// try-it, asserting that the prediction appears. With
// TRAINFLOW_SCREENSHOTS=DIR it saves a PNG of each page there.
func browseConsole(t *testing.T, base, job string) {
	ctx := browserContext(t)
	shots := os.Getenv("TRAINFLOW_SCREENSHOTS")
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			if shots == "" {
				return nil
			}
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), png, 0o644)
		})
	}
	var status, prediction string
	var svgs int
	err := chromedp.Run(ctx,
		chromedp.Navigate(base+"/console/jobs"),
		chromedp.WaitVisible(`#jobs`, chromedp.ByQuery),
		shot("console-jobs.png"),
		chromedp.Click(`a[href="/console/jobs/`+job+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`figure.chart svg`, chromedp.ByQuery),
		chromedp.Text(`#status`, &status, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("figure.chart svg").length`, &svgs),
		shot("console-job.png"),
		chromedp.Click(`#model-link`, chromedp.ByQuery),
		chromedp.WaitVisible(`form.try`, chromedp.ByQuery),
		chromedp.SetValue(`#f_age`, "52", chromedp.ByQuery),
		chromedp.Click(`#predict`, chromedp.ByQuery),
		chromedp.WaitVisible(`#prediction`, chromedp.ByQuery),
		chromedp.Text(`#prediction`, &prediction, chromedp.ByQuery),
		shot("console-model.png"),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(status, "SUCCEEDED") || svgs != 2 {
		t.Errorf("job page in the browser: status %q, %d charts; want SUCCEEDED, 2", status, svgs)
	}
	if prediction != "<=50K" && prediction != ">50K" {
		t.Errorf("try-it in the browser shows %q, want a census class", prediction)
	}
}

// TestServeConsoleFlags: serve refuses console roots it cannot parse and
// page budgets that are not sizes, naming the flag; a job directory
// outside --console-roots shows a note instead of the job's files (see
// the console package's tests for the page itself).
func TestServeConsoleFlags(t *testing.T) {
	models := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--console-roots", "s3:///no-bucket"}, "console root"},
		{[]string{"--console-page-bytes", "lots"}, "console-page-bytes"},
		{[]string{"--console-page-bytes", "-5MiB"}, "console-page-bytes"},
	} {
		var stderr bytes.Buffer
		args := append([]string{"--models", models, "--http", "127.0.0.1:0", "--log-level", "error"}, c.args...)
		err := runServe(context.Background(), nil, args, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), c.want) {
			t.Errorf("serve %v: %v %s, want an error naming %q", c.args, err, stderr.String(), c.want)
		}
	}
	var cf consoleFlags
	cf.roots = listFlag{"default"}
	cf.setRoots("/a,/b")
	cf.setRoots("s3://c/jobs?endpoint=http://minio:9000")
	if got := fmt.Sprint(cf.roots); got != "[/a /b s3://c/jobs?endpoint=http://minio:9000]" {
		t.Errorf("--console-roots /a,/b --console-roots s3://…: %s, want the three, without the default", got)
	}
}
