// Command batch is bench/batch/run.sh's helper: it converts Fashion-MNIST
// IDX files to training CSV, runs a command while sampling the peak RSS of
// the batch prediction child process, and replays a batch job's inputs to
// the online server in batches of 32 over HTTP, timing it and comparing
// every answer with the batch job's output.
//
//	go run ./bench/batch idx2csv -images I -labels L -n 10000 -out train.csv
//	go run ./bench/batch peak -- trainflow jobs submit prediction … --wait
//	go run ./bench/batch online -url http://H/v1/models/census:predict -format CSV -input rows.csv -out DIR
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trainflow/trainflow/internal/idx"
	"github.com/trainflow/trainflow/preprocess"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: batch idx2csv|peak|online …")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "idx2csv":
		err = idx2csv(os.Args[2:])
	case "peak":
		err = peak(os.Args[2:])
	case "online":
		err = online(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

func idx2csv(args []string) error {
	fs := flag.NewFlagSet("idx2csv", flag.ExitOnError)
	images := fs.String("images", "", "IDX images file")
	labels := fs.String("labels", "", "IDX labels file")
	n := fs.Int("n", 0, "rows (0: all)")
	out := fs.String("out", "", "CSV file to write: pixels separated by spaces, then the label")
	fs.Parse(args)
	im, err := idx.ReadFile(*images)
	if err != nil {
		return err
	}
	lb, err := idx.ReadFile(*labels)
	if err != nil {
		return err
	}
	rows, size := im.Dims[0], len(im.Data)/im.Dims[0]
	if *n > 0 {
		rows = min(rows, *n)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var b []byte
	for i := range rows {
		b = b[:0]
		for j, p := range im.Data[i*size : (i+1)*size] {
			if j > 0 {
				b = append(b, ' ')
			}
			b = strconv.AppendInt(b, int64(p), 10)
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(lb.Data[i]), 10)
		b = append(b, '\n')
		w.Write(b)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// peak runs a command and reports its wall time and the peak RSS (VmHWM)
// of every process whose command line contains "batch-predict".
func peak(args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var hwm int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			fmt.Printf("wall_seconds %.3f\npeak_rss_kib %d\n", time.Since(t0).Seconds(), hwm)
			return err
		case <-tick.C:
			hwm = max(hwm, childHWM())
		}
	}
}

func childHWM() int64 {
	ents, _ := os.ReadDir("/proc")
	var best int64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cl, []byte("batch-predict")) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				best = max(best, kb)
			}
		}
	}
	return best
}

type result struct {
	Line       *int64          `json:"line"`
	Index      *int64          `json:"index"`
	Prediction json.RawMessage `json:"prediction"`
}

// online posts the inputs' rows to url in batches of 32 from -clients
// goroutines, times it, and compares each answer with the batch output in
// -out (by line number or image index).
func online(args []string) error {
	fs := flag.NewFlagSet("online", flag.ExitOnError)
	url := fs.String("url", "", "predict URL")
	format := fs.String("format", "CSV", "CSV (census rows) or IDX")
	input := fs.String("input", "", "input file")
	out := fs.String("out", "", "batch job output directory")
	clients := fs.Int("clients", 2, "concurrent HTTP clients")
	batch := fs.Int("batch", 32, "instances per request")
	fs.Parse(args)

	keys, bodies, err := instances(*format, *input)
	if err != nil {
		return err
	}
	answers := make([]json.RawMessage, len(keys))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := 0
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients}}
	t0 := time.Now()
	for range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var req bytes.Buffer
			for {
				mu.Lock()
				lo := next
				next += *batch
				mu.Unlock()
				if lo >= len(keys) {
					return
				}
				hi := min(lo+*batch, len(keys))
				req.Reset()
				req.WriteString(`{"instances":[`)
				for i := lo; i < hi; i++ {
					if i > lo {
						req.WriteByte(',')
					}
					req.Write(bodies[i])
				}
				req.WriteString("]}")
				resp, err := cl.Post(*url, "application/json", &req)
				if err == nil {
					var ans struct{ Predictions []json.RawMessage }
					err = json.NewDecoder(resp.Body).Decode(&ans)
					resp.Body.Close()
					if err == nil && len(ans.Predictions) != hi-lo {
						err = fmt.Errorf("status %d, %d predictions for %d instances", resp.StatusCode, len(ans.Predictions), hi-lo)
					}
					if err == nil {
						copy(answers[lo:hi], ans.Predictions)
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					next = len(keys)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	if firstErr != nil {
		return firstErr
	}
	fmt.Printf("online_rows %d\nonline_seconds %.3f\nonline_rows_per_sec %.0f\n", len(keys), secs, float64(len(keys))/secs)

	byKey := make(map[int64]int, len(keys))
	for i, k := range keys {
		byKey[k] = i
	}
	files, _ := filepath.Glob(filepath.Join(*out, "prediction.results-*"))
	same, differ, missing := 0, 0, 0
	seen := make([]bool, len(keys))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r result
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			k := r.Index
			if r.Line != nil {
				k = r.Line
			}
			i, ok := byKey[*k]
			switch {
			case !ok:
				missing++
			case bytes.Equal(answers[i], r.Prediction):
				same++
				seen[i] = true
			default:
				differ++
				seen[i] = true
			}
		}
		fh.Close()
	}
	for _, s := range seen {
		if !s {
			missing++
		}
	}
	fmt.Printf("identical %d\ndifferent %d\nmissing %d\n", same, differ, missing)
	return nil
}

// instances returns each input row's key (line number or image index)
// and its JSON instance.
func instances(format, input string) ([]int64, [][]byte, error) {
	var keys []int64
	var bodies [][]byte
	if format == "IDX" {
		a, err := idx.ReadFile(input)
		if err != nil {
			return nil, nil, err
		}
		size := len(a.Data) / a.Dims[0]
		for i := range a.Dims[0] {
			b := []byte(`{"image":[`)
			for j, p := range a.Data[i*size : (i+1)*size] {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, int64(p), 10)
			}
			keys, bodies = append(keys, int64(i)), append(bodies, append(b, "]}"...))
		}
		return keys, bodies, nil
	}
	data, err := os.ReadFile(input)
	if err != nil {
		return nil, nil, err
	}
	schema := preprocess.CensusSchema()
	row := make([]preprocess.Value, len(schema.Columns))
	for n, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "|") {
			continue
		}
		if err := schema.ParseCSV(row, line); err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		inst := map[string]any{}
		for i, c := range schema.Columns {
			switch {
			case c.Name == schema.Label:
			case c.Type == preprocess.TypeNumber:
				inst[c.Name] = row[i].Num
			default:
				inst[c.Name] = row[i].Str
			}
		}
		b, _ := json.Marshal(inst)
		keys, bodies = append(keys, int64(n+1)), append(bodies, b)
	}
	return keys, bodies, nil
}
