package console

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.temporal.io/sdk/client"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/serving"
)

// Prefix is where the console is mounted.
const Prefix = "/console"

//go:embed templates/*.html
var templateFS embed.FS

// drawJS is the one script the console serves (same origin, no inline
// script): the drawing canvas of image inputs.
//
//go:embed static/draw.js
var drawJS []byte

// Options are the console's dependencies. Every one may be nil or empty:
// the pages then say what they cannot show.
type Options struct {
	// Client reads the jobs from Temporal (visibility, histories,
	// queries); nil: the jobs pages say the console is not connected.
	Client client.Client
	// Namespace is the client's namespace, for links into the Temporal UI.
	Namespace string
	// UIURL is the Temporal Web UI's base URL (http://host:8233); ""
	// leaves the links out.
	UIURL string
	// Registry and Repository are the prediction server's models.
	Registry   *serving.Registry
	Repository bundle.Repository
	// Roots are the directories and storage URIs (with their query:
	// endpoint, region …) job directories may lie in; a job page reads a
	// job directory only inside one, read-only, and object storage only
	// through a root's own URI. None: job pages show no job directory.
	Roots []string
	// RootsFlag names where the operator sets Roots, for the pages'
	// messages ("" means "serve --console-roots").
	RootsFlag string
	// MaxPageBytes bounds the bytes one job page reads from a job
	// directory; 0 means DefaultMaxPageBytes.
	MaxPageBytes int64
	// MaxPoints bounds the points of each curve of a chart; 0 means
	// DefaultMaxPoints.
	MaxPoints int
	// Logger logs what a page could not read; nil discards.
	Logger *slog.Logger
}

// Console serves the web console's pages. Build one with New and mount it
// with Routes.
type Console struct {
	opts  Options
	log   *slog.Logger
	roots []root
	// rootsFlag, maxPageBytes and maxPoints are the options or their
	// defaults.
	rootsFlag    string
	maxPageBytes int64
	maxPoints    int
	pages        map[string]*template.Template
	// echo is the server the console is mounted on: the try-it form posts
	// to its predict API.
	echo *echo.Echo
}

// New parses the console's templates.
func New(opts Options) (*Console, error) {
	roots, err := parseRoots(opts.Roots)
	if err != nil {
		return nil, err
	}
	if opts.MaxPageBytes < 0 || opts.MaxPoints < 0 {
		return nil, errors.New("console: negative MaxPageBytes or MaxPoints")
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Console{opts: opts, log: log.With("component", "console"), pages: map[string]*template.Template{}, roots: roots,
		rootsFlag: cmp.Or(opts.RootsFlag, "serve --console-roots"), maxPageBytes: cmp.Or(opts.MaxPageBytes, DefaultMaxPageBytes), maxPoints: cmp.Or(opts.MaxPoints, DefaultMaxPoints)}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", n, err)
		}
		c.pages[name] = t
	}
	return c, nil
}

// Routes mounts the console under Prefix on e.
func (c *Console) Routes(e *echo.Echo) {
	c.echo = e
	home := func(ec echo.Context) error { return ec.Redirect(http.StatusFound, Prefix+"/jobs") }
	e.GET(Prefix, home)
	e.GET(Prefix+"/", home)
	e.GET(Prefix+"/jobs", c.jobs)
	e.GET(Prefix+"/jobs/:id", c.job)
	e.GET(Prefix+"/models", c.models)
	e.GET(Prefix+"/models/:name", c.model)
	e.GET(Prefix+"/models/:name/rollout", c.rolloutPage)
	e.POST(Prefix+"/models/:name", c.try)
	e.GET(Prefix+"/static/draw.js", c.script)
}

// script serves the canvas script.
func (c *Console) script(ec echo.Context) error {
	h := ec.Response().Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	return ec.Blob(http.StatusOK, "text/javascript; charset=utf-8", drawJS)
}

// page is what the layout renders.
type page struct {
	Title string
	Nav   string // "jobs" or "models"
	// Refresh, if positive, reloads the page after that many seconds.
	Refresh int
	Body    any
}

// render writes a page with status code.
func (c *Console) render(ec echo.Context, code int, name string, p page) error {
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("render console page", "page", name, "error", err)
		return ec.String(http.StatusInternalServerError, "internal error")
	}
	h := ec.Response().Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	return ec.HTMLBlob(code, buf.Bytes())
}

// fail renders an error page whose message is safe to show.
func (c *Console) fail(ec echo.Context, code int, nav, msg string) error {
	return c.render(ec, code, "error", page{Title: http.StatusText(code), Nav: nav, Body: msg})
}

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"f4": func(v float64) string { return fmt.Sprintf("%.4f", v) },
	// num shows whole numbers (counts) as such, others to 4 decimals.
	"num": func(v float64) string {
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
		return fmt.Sprintf("%.4f", v)
	},
	"f0":      func(v float64) string { return fmt.Sprintf("%.0f", v) },
	"pathesc": url.PathEscape,
	"add":     func(a, b int) int { return a + b },
}

// errNoTemporal is what the jobs pages say without a Temporal client.
var errNoTemporal = errors.New("the console is not connected to Temporal: jobs cannot be listed")
