package serving_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/serving"
)

// urllibScript is what a user's Python script does with nothing but the
// standard library: urlopen(url, data=body), which sends the body as
// application/x-www-form-urlencoded, and urlopen(url) for GETs. It prints
// one JSON line per call: the status and the answer (or error) body.
const urllibScript = `
import json, sys, urllib.error, urllib.request
base, instance = sys.argv[1], json.loads(sys.argv[2])
calls = [
    ("/v1/models/census:predict", {"instances": [instance]}),
    ("/v1/models/census:predict", {"inputs": {k: [v] for k, v in instance.items()}}),
    ("/v1/models/census:classify", {"examples": [instance]}),
    ("/v1/models/census/versions/1", None),
    ("/v1/models/census/metadata", None),
    ("/v1/models/census:regress", {"examples": [instance]}),
]
for path, body in calls:
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(base + path, data=data, timeout=30) as r:
            print(json.dumps({"status": r.status, "body": json.load(r)}))
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "body": json.load(e)}))
`

// TestPythonURLLib runs Python's own urllib against the server on a
// loopback port: the client the conformance table replays byte for byte,
// here for real. Without python3 it is skipped, and says so; the table
// still runs.
func TestPythonURLLib(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: TestConformance replays urllib's requests byte for byte instead")
	}
	f := getFixture(t)
	r := startServer(t, serving.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-I", "-c", urllibScript, r.url, mustJSON(t, f.instances[0])).CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	want := decodePredictions(t, post(r.env.srv, predictURL, mustJSON(t, map[string]any{"instances": f.instances[:1]})))[0]
	type answer struct {
		Status int             `json:"status"`
		Body   json.RawMessage `json:"body"`
	}
	var got []answer
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		var a answer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("python3 printed %q: %v", line, err)
		}
		got = append(got, a)
	}
	if len(got) != 6 {
		t.Fatalf("python3 printed %d answers, want 6:\n%s", len(got), out)
	}
	for i, c := range []struct {
		status int
		want   string // a substring of the answer
	}{
		{200, `"class":"` + want.Class + `"`},
		{200, `{"outputs":{"class":["` + want.Class + `"]`},
		{200, `{"results":[[`},
		{200, `{"model_version_status":[{"version":"1","state":"AVAILABLE","status":{"error_code":"OK","error_message":""}}]}`},
		{200, `"signature_def":{"signature_def":{`},
		{400, `"error":"model \"census\" is a classifier: use :classify or :predict"`},
	} {
		body := string(got[i].Body)
		if got[i].Status != c.status || !strings.Contains(strings.ReplaceAll(body, " ", ""), strings.ReplaceAll(c.want, " ", "")) {
			t.Errorf("call %d: got %d %s, want %d containing %s", i, got[i].Status, clip(got[i].Body), c.status, c.want)
		}
	}
}
