package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/trainflow/trainflow/internal/predictapi"
	"github.com/trainflow/trainflow/jobs"
)

func runPredict(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("predict", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", envOr("TRAINFLOW_SERVER", "http://127.0.0.1:8080"), "prediction server URL ($TRAINFLOW_SERVER)")
	model := fs.String("model", "", "model name (required)")
	version := fs.Int64("version", 0, "model version (default: the model's default)")
	file := fs.String("json-instances", "", "file of instances: newline-delimited JSON, a JSON array, or {\"instances\": [...]}; - for stdin")
	output := fs.String("output", "text", "output format: text or json")
	tokenFile := tokenFileFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" || *file == "" {
		return usageError{errors.New("--model and --json-instances are required")}
	}
	token, err := readTokenFile(*tokenFile)
	if err != nil {
		return err
	}
	var b []byte
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
	preds, err := predictapi.Client{BaseURL: *server, Token: token}.Predict(ctx, *model, *version, instances)
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
			fmt.Fprintf(stdout, "%d\tvalue %s\n", i, jobs.Clean(fmt.Sprint(v)))
			continue
		}
		// The server's answer: a class may be any string of its model.
		fmt.Fprintf(stdout, "%d\tclass %s\tprobabilities %s\n", i, jobs.Clean(fmt.Sprint(p["class"])), jobs.Clean(fmt.Sprint(p["probabilities"])))
	}
	return nil
}

// tokenFileFlag registers --auth-token-file, the file of the token a
// server started with the same flag wants ($TRAINFLOW_AUTH_TOKEN_FILE).
func tokenFileFlag(fs *flag.FlagSet) *string {
	return fs.String("auth-token-file", envOr("TRAINFLOW_AUTH_TOKEN_FILE", ""), "file holding the prediction server's token, sent as \"Authorization: Bearer TOKEN\" ($TRAINFLOW_AUTH_TOKEN_FILE); none: no token")
}

// readTokenFile reads the token in the file of --auth-token-file ("" if
// path is ""): one token of at least 16 characters without spaces, as
// serve takes it. Errors name the flag, never the file's content.
func readTokenFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usageError{fmt.Errorf("--auth-token-file: %w", err)}
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 || strings.ContainsAny(token, " \t\r\n") {
		return "", usageError{fmt.Errorf("--auth-token-file %s: want one token of at least 16 characters, no spaces", path)}
	}
	return token, nil
}
