package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// loadInstances reads --json-instances: newline-delimited JSON objects (as
// gcloud takes them), a JSON array of objects, or {"instances": [...]}.
func loadInstances(b []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil, errors.New("no instances")
	}
	switch trimmed[0] {
	case '[':
		var list []json.RawMessage
		if err := json.Unmarshal(trimmed, &list); err != nil {
			return nil, err
		}
		return list, nil
	case '{':
		var wrapped struct {
			Instances []json.RawMessage `json:"instances"`
		}
		if json.Unmarshal(trimmed, &wrapped) == nil && wrapped.Instances != nil {
			return wrapped.Instances, nil
		}
	}
	var list []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(trimmed))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil, fmt.Errorf("line %d is not JSON", n)
		}
		list = append(list, append(json.RawMessage{}, line...))
	}
	return list, sc.Err()
}

func runPredict(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("predict", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", envOr("TRAINFLOW_SERVER", "http://127.0.0.1:8080"), "prediction server URL ($TRAINFLOW_SERVER)")
	model := fs.String("model", "", "model name (required)")
	version := fs.Int64("version", 0, "model version (default: the model's default)")
	file := fs.String("json-instances", "", "file of instances: newline-delimited JSON, a JSON array, or {\"instances\": [...]}; - for stdin")
	output := fs.String("output", "text", "output format: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" || *file == "" {
		return usageError{errors.New("--model and --json-instances are required")}
	}
	var b []byte
	var err error
	if *file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(*file)
	}
	if err != nil {
		return err
	}
	instances, err := loadInstances(b)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", *file, err)}
	}
	path := "/v1/models/" + *model
	if *version > 0 {
		path += fmt.Sprintf("/versions/%d", *version)
	}
	body, _ := json.Marshal(map[string]any{"instances": instances})
	var out struct {
		Predictions []map[string]any `json:"predictions"`
	}
	if err := call(ctx, http.MethodPost, strings.TrimRight(*server, "/")+path+":predict", body, &out); err != nil {
		return err
	}
	if *output == "json" {
		return writeJSON(stdout, out)
	}
	for i, p := range out.Predictions {
		if v, ok := p["value"]; ok { // a regressor
			fmt.Fprintf(stdout, "%d\tvalue %v\n", i, v)
			continue
		}
		fmt.Fprintf(stdout, "%d\tclass %v\tprobabilities %v\n", i, p["class"], p["probabilities"])
	}
	return nil
}

// call sends a request to the prediction server and decodes its JSON
// answer; the server's {"error"} becomes the error, 404 a notFoundError.
func call(ctx context.Context, method, url string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("prediction server: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		err := fmt.Errorf("%s: %s", resp.Status, msg)
		if resp.StatusCode == http.StatusNotFound {
			return notFoundError{err}
		}
		return err
	}
	return json.Unmarshal(raw, out)
}

func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("models", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", envOr("TRAINFLOW_SERVER", "http://127.0.0.1:8080"), "prediction server URL ($TRAINFLOW_SERVER)")
	output := fs.String("output", "text", "output format: text or json")
	if len(args) == 0 || (args[0] != "list" && args[0] != "describe") {
		return usageError{errors.New("want: models list | models describe NAME")}
	}
	sub := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	base := strings.TrimRight(*server, "/") + "/v1/models"
	if sub == "list" {
		var out struct {
			Models []struct {
				Name     string  `json:"name"`
				Versions []int64 `json:"versions"`
				Default  int64   `json:"default"`
			} `json:"models"`
		}
		if err := call(ctx, http.MethodGet, base, nil, &out); err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(stdout, out)
		}
		for _, m := range out.Models {
			fmt.Fprintf(stdout, "%s\tdefault %d\tversions %v\n", m.Name, m.Default, m.Versions)
		}
		return nil
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("want: models describe NAME")}
	}
	var meta map[string]any
	if err := call(ctx, http.MethodGet, base+"/"+fs.Arg(0)+"/metadata", nil, &meta); err != nil {
		return err
	}
	return writeJSON(stdout, meta)
}
