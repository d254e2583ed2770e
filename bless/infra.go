package bless

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/serving"
	"github.com/trainflow/trainflow/train"
)

// infraModel is the name the throwaway server serves the candidate under.
const infraModel = "candidate"

// Infra loads the candidate bundle b into a throwaway model repository
// (a temporary directory), serves it with the prediction server (a real
// listener on 127.0.0.1) and sends it each example instance as its own
// :predict request. It passes when every answer is a 200 with one
// prediction and arrives within maxLatency. A candidate the server
// refuses to load fails with the reason in Error. types builds b's model
// (nil: the built-in types only). The server and the directory are gone
// when Infra returns.
func Infra(ctx context.Context, b *bundle.Bundle, types *train.Registry, examples []json.RawMessage, maxLatency time.Duration, log *slog.Logger) *bundle.InfraCheck {
	ic := &bundle.InfraCheck{MaxLatencyMS: int(maxLatency / time.Millisecond), Requests: len(examples)}
	fail := func(format string, a ...any) *bundle.InfraCheck {
		ic.Error = fmt.Sprintf(format, a...)
		return ic
	}
	if len(examples) == 0 {
		return fail("no example rows to send")
	}
	dir, err := os.MkdirTemp("", "trainflow-infra-")
	if err != nil {
		return fail("temporary repository: %v", err)
	}
	defer os.RemoveAll(dir)
	repo, err := bundle.OpenRepository(ctx, dir)
	if err != nil {
		return fail("temporary repository: %v", err)
	}
	defer repo.Close()
	if _, _, err := repo.Publish(ctx, infraModel, "bless", b, true); err != nil {
		return fail("publish into the temporary repository: %v", err)
	}
	reg := serving.NewRegistry(repo, types, log)
	if err := reg.Reload(); err != nil {
		return fail("load: %v", err)
	}
	if _, err := reg.Get(infraModel, 1); err != nil {
		return fail("the prediction server does not load the candidate: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail("listen: %v", err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serving.New(reg, log, serving.Options{}).Serve(sctx, ln) }()
	defer func() {
		stop()
		<-done
	}()
	client := &http.Client{Timeout: maxLatency + 5*time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	url := "http://" + ln.Addr().String() + "/v1/models/" + infraModel + ":predict"
	var slowest time.Duration
	for i, ex := range examples {
		body := append(append([]byte(`{"instances":[`), ex...), "]}"...)
		t0 := time.Now()
		status, n, err := post(ctx, client, url, body)
		d := time.Since(t0)
		slowest = max(slowest, d)
		switch {
		case err != nil:
			if ic.Error == "" {
				ic.Error = fmt.Sprintf("example %d: %v", i, err)
			}
		case status != http.StatusOK || n != 1:
			if ic.Error == "" {
				ic.Error = fmt.Sprintf("example %d: HTTP %d with %d predictions", i, status, n)
			}
		case d > maxLatency:
			if ic.Error == "" {
				ic.Error = fmt.Sprintf("example %d: answered in %.1f ms", i, float64(d)/float64(time.Millisecond))
			}
		default:
			ic.OK++
		}
	}
	ic.LatencyMS = float64(slowest) / float64(time.Millisecond)
	ic.Pass = ic.OK == ic.Requests
	return ic
}

// post sends one predict request and returns the status and the number of
// predictions in the answer.
func post(ctx context.Context, client *http.Client, url string, body []byte) (int, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, 0, err
	}
	var out struct {
		Predictions []json.RawMessage `json:"predictions"`
	}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, len(out.Predictions), nil
}
