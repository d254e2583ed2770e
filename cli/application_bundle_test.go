package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/workflows"
)

// TestApplicationBundle: a program that writes a trainflow bundle (the
// bundle package's fixture) to its model dir gets it published, version
// 1, and the prediction server answers with it; a program whose bundle
// is damaged still succeeds, publishes nothing and says why, naming the
// file.
func TestApplicationBundle(t *testing.T) {
	st, home := appStack(t)
	fixture, _ := filepath.Abs("../bundle/testdata/v1/objects/census/1")
	good := startUIStyle(t, st.Client, "app_bundle", fmt.Sprintf(`{"job_id":"app_bundle","model_name":"appcensus","application":{"name":"bundle","args":[%q]}}`, fixture))
	bad := startUIStyle(t, st.Client, "app_bundle_bad", fmt.Sprintf(`{"job_id":"app_bundle_bad","model_name":"appbad","application":{"name":"bundle","args":[%q,"corrupt"]}}`, fixture))

	res, err := waitJob(t, good)
	if err != nil {
		t.Fatalf("job: %v", err)
	}
	if res.Version != 1 || res.Note != "" || res.Export != filepath.Join(home, "jobs", "app_bundle", "export", "app", "0") {
		t.Fatalf("published version %d from %q, note %q; want version 1 from export/app/0 and no note", res.Version, res.Export, res.Note)
	}
	recordApp(t, st, "app_bundle", "application_published", versionProof("app-publish"), activityProof(workflows.PublishActivity))
	instances := filepath.Join(t.TempDir(), "instances.json")
	os.WriteFile(instances, []byte(demoInstance+"\n"), 0o644)
	code, out, errs := cli(t, "predict", "--server", "http://"+st.HTTPAddr, "--model", "appcensus", "--json-instances", instances, "--output", "json")
	if code != exitOK || strings.Count(out, `"class"`) != 1 {
		t.Fatalf("predict: exit %d: %s %s", code, out, errs)
	}

	// Reset to publish: the same bundle again, the same version, nothing
	// run again.
	code, out, errs = cli(t, "jobs", "reset", "app_bundle", "--to", "publish", "--temporal", st.Temporal.FrontendAddr(), "--output", "json")
	var r struct {
		RunID string `json:"run_id"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("jobs reset --to publish: exit %d: %s %s", code, out, errs)
	}
	again, err := waitJob(t, st.Client.GetWorkflow(context.Background(), "app_bundle", r.RunID))
	if err != nil || again.Version != 1 || again.Export != res.Export {
		t.Errorf("reset to publish: %v, version %d from %q; want version 1 from %q again", err, again.Version, again.Export, res.Export)
	}
	if n := replicasScheduled(t, st, "app_bundle", r.RunID); n != 1 {
		t.Errorf("the reset run holds %d replicas, want the one before the reset point (none run again)", n)
	}

	res, err = waitJob(t, bad)
	if err != nil {
		t.Fatalf("a refused bundle failed the job: %v", err)
	}
	if res.Version != 0 || !strings.Contains(res.Note, "nothing was published: the bundle in the model dir is refused") || !strings.Contains(res.Note, "model.ckpt") {
		t.Errorf("version %d note %q; want nothing published, the refusal naming model.ckpt", res.Version, res.Note)
	}
	if code, out, _ := cli(t, "models", "list", "--server", "http://"+st.HTTPAddr, "--output", "json"); code != exitOK || strings.Contains(out, "appbad") {
		t.Errorf("models list: exit %d: %s", code, out)
	}
}
