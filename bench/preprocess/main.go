// Command preprocess benchmarks trainflow's preprocessing end to end: it
// generates census-like rows (internal/datagen), then runs, each in a child
// process of its own, the Beam pipeline exactly as the preprocess activity
// does (`trainflow preprocess REQUEST.json`, i.e. beampipe.ChildMain on
// prism) and the plain single-goroutine loop (preprocess.RunLocal), and
// reports rows/s, peak RSS (the child's maximum resident set size, as
// /usr/bin/time -v reports it) and their ratio.
//
//	go run ./bench/preprocess -rows 1000000
//	TRAINFLOW_BIN=./trainflow go run ./bench/preprocess   # beam child = the real binary
//
//	go run ./bench/preprocess -cpuprofile /tmp/pp-     # + /tmp/pp-beam.pprof, /tmp/pp-local.pprof
//
// Goal (issue #30): Beam ≥ 1.0× the plain loop, peak RSS ≤ 300 MiB.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/trainflow/trainflow/internal/datagen"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/preprocess/beampipe"
)

func main() {
	if len(os.Args) > 2 {
		switch os.Args[1] {
		case "child-beam":
			os.Exit(profiled(func() int { return beampipe.ChildMain(context.Background(), os.Args[2:], os.Stderr) }))
		case "child-local":
			os.Exit(profiled(func() int { return childLocal(os.Args[2]) }))
		}
	}
	rows := flag.Int("rows", 1_000_000, "training rows to generate")
	evalRows := flag.Int("eval_rows", 100_000, "evaluation rows to generate")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "trainflow-bench"), "work directory (data is reused when present)")
	schema := flag.String("schema", "census", "census or census_wide")
	trainShards := flag.Int("train_shards", 8, "train shards (= Beam elements)")
	evalShards := flag.Int("eval_shards", 2, "eval shards")
	runs := flag.Int("runs", 1, "runs of each path")
	cpuprofile := flag.String("cpuprofile", "", "write each child's CPU profile to this prefix + local.pprof or beam.pprof")
	flag.Parse()
	if *cpuprofile != "" {
		os.Setenv(profileEnv, *cpuprofile)
	}
	if err := run(*dir, *rows, *evalRows, *schema, *trainShards, *evalShards, *runs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(dir string, rows, evalRows int, schema string, trainShards, evalShards, runs int) error {
	train := filepath.Join(dir, fmt.Sprintf("train-%d.csv", rows))
	eval := filepath.Join(dir, fmt.Sprintf("eval-%d.csv", evalRows))
	for _, f := range []struct {
		path string
		n    int
		seed uint64
		test bool
	}{{train, rows, 1, false}, {eval, evalRows, 2, true}} {
		if err := generate(f.path, f.n, f.seed, f.test); err != nil {
			return err
		}
	}
	st, _ := os.Stat(train)
	s := preprocess.CensusSchema()
	if schema == "census_wide" {
		s = preprocess.CensusWideSchema()
	}
	fmt.Printf("input: %d train rows (%.1f MB) + %d eval rows, schema %s, %d+%d shards, GOMAXPROCS cores %d\n",
		rows, float64(st.Size())/1e6, evalRows, schema, trainShards, evalShards, numCPU())
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	beamCmd := []string{exe, "child-beam"}
	if bin := os.Getenv("TRAINFLOW_BIN"); bin != "" {
		beamCmd = []string{bin, "preprocess"}
	}
	total := float64(rows + evalRows)
	var best [2]float64
	var rss [2]int64
	for i := range runs {
		for p, path := range []string{"local", "beam"} {
			r := preprocess.Request{Schema: s, Train: []string{train}, Eval: []string{eval},
				OutDir: filepath.Join(dir, "job-"+path), TrainShards: trainShards, EvalShards: evalShards, Seed: 1, MaxBadFraction: 0.001}
			os.RemoveAll(r.OutDir)
			req := filepath.Join(dir, "req-"+path+".json")
			b, _ := json.Marshal(r)
			if err := os.WriteFile(req, b, 0o644); err != nil {
				return err
			}
			argv := []string{exe, "child-local", req}
			if path == "beam" {
				argv = append(beamCmd, req)
			}
			secs, maxRSS, err := measure(argv, filepath.Join(dir, path+".log"))
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			m, err := preprocess.ReadManifest(r.OutDir)
			if err != nil {
				return err
			}
			if float64(m.TrainRows+m.EvalRows) != total {
				return fmt.Errorf("%s: wrote %d rows, want %v", path, m.TrainRows+m.EvalRows, total)
			}
			rate := total / secs
			fmt.Printf("run %d %-5s %6.2f s  %9.0f rows/s  peak RSS %5d MiB  (dim %d, hash %.12s)\n", i+1, path, secs, rate, maxRSS>>20, m.Dim, m.TransformHash)
			best[p] = max(best[p], rate)
			rss[p] = max(rss[p], maxRSS)
		}
	}
	fmt.Printf("best: plain loop %.0f rows/s (peak %d MiB), beam %.0f rows/s (peak %d MiB); beam/plain = %.2f (goal >= 1.0, RSS <= 300 MiB)\n",
		best[0], rss[0]>>20, best[1], rss[1]>>20, best[1]/best[0])
	return nil
}

// measure runs argv and returns its wall time and maximum resident set
// size in bytes (getrusage ru_maxrss, in KiB on Linux).
func measure(argv []string, logPath string) (float64, int64, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, 0, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("%v: %w (log %s)", argv, err, logPath)
	}
	secs := time.Since(start).Seconds()
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var maxRSS int64
	if ru != nil {
		maxRSS = ru.Maxrss << 10
	}
	return secs, maxRSS, nil
}

// profileEnv passes -cpuprofile to the children.
const profileEnv = "TRAINFLOW_BENCH_CPUPROFILE"

// profiled runs a child's body, under a CPU profile if profileEnv names a
// prefix (the child's path, local or beam, is appended).
func profiled(body func() int) int {
	prefix := os.Getenv(profileEnv)
	if prefix == "" {
		return body()
	}
	f, err := os.Create(prefix + strings.TrimPrefix(os.Args[1], "child-") + ".pprof")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pprof.StopCPUProfile()
	return body()
}

func childLocal(req string) int {
	b, err := os.ReadFile(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var r preprocess.Request
	if err := json.Unmarshal(b, &r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := preprocess.RunLocal(&r)
	if err != nil || m.Failure != "" {
		fmt.Fprintln(os.Stderr, err, m)
		return 1
	}
	return 0
}

func generate(path string, n int, seed uint64, test bool) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := datagen.Census(w, n, seed, test); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func numCPU() int {
	return runtime.GOMAXPROCS(0)
}
