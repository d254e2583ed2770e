package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/trainflow/trainflow/internal/predictapi"
)

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
	instances, err := predictapi.LoadInstances(b)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", *file, err)}
	}
	preds, err := predictapi.Client{BaseURL: *server}.Predict(ctx, *model, *version, instances)
	if err != nil {
		return err
	}
	out := struct {
		Predictions []map[string]any `json:"predictions"`
	}{preds}
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
	c := predictapi.Client{BaseURL: *server}
	if sub == "list" {
		models, err := c.Models(ctx)
		if err != nil {
			return err
		}
		if *output == "json" {
			return writeJSON(stdout, struct {
				Models []predictapi.Model `json:"models"`
			}{models})
		}
		for _, m := range models {
			fmt.Fprintf(stdout, "%s\tdefault %d\tversions %v\n", m.Name, m.Default, m.Versions)
		}
		return nil
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("want: models describe NAME")}
	}
	meta, err := c.Metadata(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	return writeJSON(stdout, meta)
}
