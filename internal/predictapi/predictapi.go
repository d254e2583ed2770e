// Package predictapi is a client of the prediction server's HTTP API
// (TF Serving / AI Platform v1 routes under /v1/models), as the
// `trainflow predict` and `trainflow models` commands use it.
package predictapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/trainflow/trainflow/internal/errmark"
)

// ErrNotFound is matched (errors.Is) by errors about a model or version
// the server does not have (HTTP 404).
var ErrNotFound = errors.New("predictapi: not found")

// Timeout bounds each request.
const Timeout = 30 * time.Second

// Client calls the prediction server at BaseURL (such as
// http://127.0.0.1:8080) with http.DefaultClient.
type Client struct {
	BaseURL string
	// Token, if not empty, is sent as "Authorization: Bearer TOKEN", as a
	// server started with --auth-token-file wants.
	Token string
}

// Model is one model the server serves.
type Model struct {
	Name     string  `json:"name"`
	Versions []int64 `json:"versions"`
	Default  int64   `json:"default"`
}

// Predict sends instances (JSON objects of raw features) to version of
// model (0: its default version) and returns the predictions, one per
// instance.
func (c Client) Predict(ctx context.Context, model string, version int64, instances []json.RawMessage) ([]map[string]any, error) {
	path := "/v1/models/" + model
	if version > 0 {
		path += fmt.Sprintf("/versions/%d", version)
	}
	body, _ := json.Marshal(map[string]any{"instances": instances})
	var out struct {
		Predictions []map[string]any `json:"predictions"`
	}
	if err := c.call(ctx, http.MethodPost, path+":predict", body, &out); err != nil {
		return nil, err
	}
	return out.Predictions, nil
}

// Models lists the models the server serves.
func (c Client) Models(ctx context.Context) ([]Model, error) {
	var out struct {
		Models []Model `json:"models"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/models", nil, &out); err != nil {
		return nil, err
	}
	return out.Models, nil
}

// Metadata returns what the server answers for model name's
// /v1/models/NAME/metadata.
func (c Client) Metadata(ctx context.Context, name string) (map[string]any, error) {
	var meta map[string]any
	if err := c.call(ctx, http.MethodGet, "/v1/models/"+name+"/metadata", nil, &meta); err != nil {
		return nil, err
	}
	return meta, nil
}

// call sends a request to the prediction server and decodes its JSON
// answer; the server's {"error"} becomes the error, a 404 one matching
// ErrNotFound.
func (c Client) call(ctx context.Context, method, path string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
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
			return errmark.Mark(err, ErrNotFound)
		}
		return err
	}
	return json.Unmarshal(raw, out)
}

// LoadInstances reads a file of instances: newline-delimited JSON objects
// (as gcloud takes them), a JSON array of objects, or {"instances": [...]}.
func LoadInstances(b []byte) ([]json.RawMessage, error) {
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
