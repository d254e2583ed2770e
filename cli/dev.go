package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/trainflow/trainflow/console"
	"github.com/trainflow/trainflow/internal/keyfile"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/train"
	"github.com/trainflow/trainflow/workflows"
)

// demoInstance is one census row as a client would send it.
const demoInstance = `{"age": 39, "workclass": "State-gov", "education": "Bachelors", "education_num": 13, "marital_status": "Married-civ-spouse", "occupation": "Exec-managerial", "relationship": "Husband", "race": "White", "gender": "Male", "capital_gain": 2174, "capital_loss": 0, "hours_per_week": 45, "native_country": "United-States"}`

func runDev(ctx context.Context, types *train.Registry, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	home := fs.String("home", defaultHome(), "home directory: Temporal's SQLite file, job dirs, model repository")
	temporalAddr := fs.String("temporal", "127.0.0.1:7233", "Temporal frontend host:port")
	temporalDB := fs.String("temporal-db", os.Getenv("TRAINFLOW_TEMPORAL_DB"), "keep Temporal's state in PostgreSQL at postgres://user:password@host:port/database (and database_visibility; created if missing) instead of the SQLite file in --home (default $TRAINFLOW_TEMPORAL_DB, which keeps the password out of ps)")
	uiAddr := fs.String("ui", "127.0.0.1:8233", "Temporal Web UI host:port (empty: no UI)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "prediction server host:port")
	demo := fs.Bool("demo", false, "submit a census training job, wait for it, and print a curl to query the model")
	data := fs.String("data", "", "with --demo: directory holding adult.data and adult.test (default: generated census-like rows)")
	exit := fs.Bool("exit", false, "with --demo: stop once the demo job is done instead of serving until Ctrl-C")
	level := fs.String("log-level", "warn", "log level")
	metricsAddr := fs.String("metrics-listen", "", "serve the worker's Prometheus metrics at http://ADDR/metrics (the prediction server's are at --http /metrics); empty: off")
	var trust trustFlags
	trust.register(fs)
	var shadow shadowFlags
	shadow.register(fs)
	var ml mlFlags
	ml.register(fs)
	var pageBytes sizeFlag
	fs.Var(&pageBytes, "console-page-bytes", "the most a console job page reads from a job directory per view, e.g. 24MiB (default "+strconv.Itoa(console.DefaultMaxPageBytes>>20)+"MiB); the console reads job directories only inside HOME/jobs and --data-roots")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := shadow.check(); err != nil {
		return err
	}
	if err := ml.check(); err != nil {
		return err
	}
	if err := trust.loadApplications(); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	if *data != "" {
		// The demo's data directory is one jobs may read.
		if *data, err = filepath.Abs(*data); err != nil {
			return usageError{fmt.Errorf("--data: %w", err)}
		}
		trust.dataRoots = append(trust.dataRoots, *data)
	}
	st, err := startStack(ctx, stackConfig{Home: *home, TemporalDB: *temporalDB, FrontendAddr: *temporalAddr, UIAddr: *uiAddr, HTTPAddr: *httpAddr, MetricsAddr: *metricsAddr, Logger: log, Trust: &trust, ConsolePageBytes: int64(pageBytes), ModelTypes: types, ShadowMaxLive: shadow.maxLive, ML: &ml})
	if err != nil {
		return err
	}
	defer st.Stop()
	// The other commands of this user find this stack's home (defaultHome).
	defer recordStack(*home)()
	ns := st.Temporal.Namespace()
	fmt.Fprintf(stdout, "trainflow dev is up (home %s)\n", *home)
	if u := st.Temporal.UIURL(); u != "" {
		fmt.Fprintf(stdout, "  Temporal Web UI   %s/namespaces/%s/workflows\n", u, ns)
	}
	fmt.Fprintf(stdout, "  Temporal API      %s (namespace %s, task queue %s)\n", st.Temporal.FrontendAddr(), ns, workflows.TaskQueue)
	// Callers without a token get health only; trainflow's commands
	// find the token themselves, other clients are told where it is.
	absHome, _ := filepath.Abs(*home)
	tokenFile := keyfile.UserToken(absHome)
	fmt.Fprintf(stdout, "  API key           %s (trainflow commands send it; Temporal CLI: temporal --api-key \"$(cat %s)\" --tls=false …)\n", tokenFile, tokenFile)
	fmt.Fprintf(stdout, "  Predictions       http://%s/v1/models/MODEL:predict\n", st.HTTPAddr)
	fmt.Fprintf(stdout, "  Console           http://%s/console/\n", st.HTTPAddr)
	fmt.Fprintf(stdout, "  Cloud ML Engine   http://%s/ (ml/v1: rootUrl of googleapis, discovery at /discovery/v1/apis/ml/v1/rest; docs/ml-api.md)\n", st.HTTPAddr)
	if st.MetricsAddr != "" {
		fmt.Fprintf(stdout, "  Worker metrics    http://%s/metrics\n", st.MetricsAddr)
	}
	if *demo {
		if err := runDemo(ctx, st, *data, stdout); err != nil {
			return err
		}
		if *exit {
			return nil
		}
	}
	fmt.Fprintln(stdout, "Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Fprintln(stdout, "shutting down")
	return st.Stop()
}

func runDemo(ctx context.Context, st *stack, dataDir string, stdout io.Writer) error {
	id := "census_" + time.Now().UTC().Format("20060102_150405")
	spec := jobspec.JobSpec{JobID: id, Preset: jobspec.PresetCensus, Data: jobspec.DataSpec{Dir: dataDir}}
	run, err := jobs.Start(ctx, st.Client, spec)
	if err != nil {
		return err
	}
	data := "generated census-like rows"
	if dataDir != "" {
		data = dataDir
	}
	fmt.Fprintf(stdout, "\ndemo: submitted census training job %s on %s\n", id, data)
	if u := st.Temporal.UIURL(); u != "" {
		fmt.Fprintf(stdout, "demo: watch it at %s/namespaces/%s/workflows/%s\n", u, st.Temporal.Namespace(), id)
	}
	var res workflows.JobResult
	if err := run.Get(ctx, &res); err != nil {
		return fmt.Errorf("demo job %s: %w", id, err)
	}
	fmt.Fprintf(stdout, "demo: job %s succeeded: %d training rows, %d steps, eval %s\n",
		id, res.TrainRows, res.GlobalStep, res.Metrics.Summary())
	fmt.Fprintf(stdout, "demo: serving model %q version %d from %s\n", res.Model, res.Version, res.Export)
	url := fmt.Sprintf("http://%s/v1/models/%s:predict", st.HTTPAddr, res.Model)
	body := `{"instances": [` + demoInstance + `]}`
	fmt.Fprintf(stdout, "\nTry it:\n  curl -s -H 'Content-Type: application/json' -d '%s' %s\n", body, url)
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return fmt.Errorf("query the demo model: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("query the demo model: %s: %s", resp.Status, answer)
	}
	var pretty bytes.Buffer
	json.Indent(&pretty, answer, "  ", "  ")
	fmt.Fprintf(stdout, "which answers:\n  %s\n\n", pretty.String())
	return nil
}
