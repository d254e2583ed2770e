package console

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// TestJobPageTellsWhatWasPublished (issue #43): the job page of an
// application job says nothing was published, and why, as `jobs
// describe` does (jobs.OutcomeOf), and links to no model page that does
// not exist; a built-in job's page names the version it published.
func TestJobPageTellsWhatWasPublished(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	for _, tc := range []struct {
		name      string
		model     string
		served    bool
		res       *workflows.JobResult
		want, not []string
	}{
		{"application", "trainer", false,
			&workflows.JobResult{JobID: "pkg_1", Model: "trainer", Export: "/jobs/pkg_1/model", Note: "nothing was published: the application wrote no trainflow bundle"},
			[]string{"metrics: none reported", "nothing published: the application wrote no trainflow bundle", "artifact <code>/jobs/pkg_1/model</code>"},
			[]string{"published trainer", "version 0", `href="/console/models/trainer`, "accuracy 0.0000"}},
		{"built-in", "census", true,
			&workflows.JobResult{JobID: "census_1", Model: "census", Version: 3, GlobalStep: 120, TrainRows: 1000, Metrics: train.Metrics{Examples: 250, Accuracy: 0.8}},
			[]string{"120 steps on 1000 rows", "accuracy 0.8000", `published <a href="/console/models/census?version=3">census version 3</a>`, `id="model-link"`},
			[]string{"nothing published"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &jobBody{ID: tc.res.JobID, Status: "SUCCEEDED", Phase: "SUCCEEDED", Model: tc.model, ModelServed: tc.served}
			b.setResult(tc.res)
			rec := httptest.NewRecorder()
			ec := e.NewContext(httptest.NewRequest(http.MethodGet, "/console/jobs/"+tc.res.JobID, nil), rec)
			if err := c.render(ec, http.StatusOK, "job", page{Title: "Job", Nav: "jobs", Body: b}); err != nil {
				t.Fatal(err)
			}
			page := rec.Body.String()
			for _, w := range tc.want {
				if !strings.Contains(page, w) {
					t.Errorf("the page lacks %q", w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(page, w) {
					t.Errorf("the page says %q", w)
				}
			}
		})
	}
}

// TestModelPageSaysWhyNotLoaded (issue #43): a version the server has
// not loaded says why (outside what the model's config serves, or
// refused), instead of an empty row marked "not loaded".
func TestModelPageSaysWhyNotLoaded(t *testing.T) {
	all := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	for _, c := range []struct {
		cfg    bundle.Config
		cfgErr error
		v      int64
		want   string
	}{
		{bundle.Config{Latest: 3}, nil, 2, "not served: servers load the newest 3 versions, the default (8) and labelled ones (the model's config.json)"},
		{bundle.Config{Latest: 3}, nil, 7, "not loaded: refused by this server or not loaded yet"},
		{bundle.Config{Versions: []int64{4}}, nil, 5, "not served: servers load versions [4], the default (8)"},
		{bundle.Config{Latest: 3, Labels: map[string]int64{"stable": 2}}, nil, 2, "not loaded: refused"},
		{bundle.Config{}, errors.New("bad json"), 1, "not served: servers load the newest 3 versions, the default (8) and labelled ones (the defaults: the model's config.json does not read)"},
	} {
		if got := notLoadedWhy(c.cfg, c.cfgErr, all, 8, c.v); !strings.HasPrefix(got, c.want) {
			t.Errorf("version %d under %+v: %q, want %q", c.v, c.cfg, got, c.want)
		}
	}
	cons, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := &modelBody{Name: "census", Default: 8, Try: 8, Versions: []version{{Version: 8, Loaded: true, Default: true}, {Version: 2, Why: notLoadedWhy(bundle.Config{Latest: 3}, nil, all, 8, 2)}}}
	rec := httptest.NewRecorder()
	ec := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/console/models/census", nil), rec)
	if err := cons.render(ec, http.StatusOK, "model", page{Title: "Model census", Nav: "models", Body: b}); err != nil {
		t.Fatal(err)
	}
	if page := rec.Body.String(); !strings.Contains(page, `<span class="note why">not served: servers load the newest 3 versions`) {
		t.Errorf("the model page does not say why version 2 is not loaded:\n%s", page)
	}
}

// TestJobPageShowsRestart (issue #43): the job page of an application
// job at generation 2 says so, and which replica generation 1 lost, when
// and why, as `jobs describe` does (jobs.Generations).
func TestJobPageShowsRestart(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 26, 4, 43, 23, 0, time.UTC)
	b := &jobBody{ID: "pkg_1", Status: "SUCCEEDED", Phase: "SUCCEEDED", Generations: &jobs.Generations{Gen: 2,
		Restarts: []jobs.Restart{{Gen: 1, Replica: "worker-0", Reason: "worker-0 (sandbox pid 14210): killed by signal killed", Time: at}}}}
	b.setResult(&workflows.JobResult{JobID: "pkg_1", GlobalStep: 200, Note: "nothing was published: the application wrote no trainflow bundle"})
	rec := httptest.NewRecorder()
	ec := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/console/jobs/pkg_1", nil), rec)
	if err := c.render(ec, http.StatusOK, "job", page{Title: "Job", Nav: "jobs", Body: b}); err != nil {
		t.Fatal(err)
	}
	page := rec.Body.String()
	for _, w := range []string{`id="generation">generation 2 (1 restart)`,
		"restart: generation 1 lost worker-0 at 2026-11-26T04:43:23Z: worker-0 (sandbox pid 14210): killed by signal killed"} {
		if !strings.Contains(page, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
}
