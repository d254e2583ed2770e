package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/devserver"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/internal/testenv/miniotest"
	"github.com/trainflow/trainflow/internal/testenv/pgtest"
)

// TestComposeTopologyWithoutDocker runs docker-compose.yml's topology from
// real parts, without Docker: Temporal on PostgreSQL (not SQLite), MinIO
// holding the data, the job dirs and the model repository, three
// `trainflow worker` processes with homes of their own, and `trainflow
// serve` reading the model repository from MinIO. One distributed census
// job runs end to end, and the served model answers.
func TestComposeTopologyWithoutDocker(t *testing.T) {
	pg := pgtest.Use(t)
	mc := miniotest.Use(t) // the worker processes inherit its credentials
	root, err := mc.Prefix("compose")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if st, err := storage.Open(context.Background(), root); err == nil {
			st.DeleteAll(context.Background(), "")
			st.Close()
		}
	})
	data := uploadCensus(t, root)
	jobs, models := joinURI(root, "jobs"), joinURI(root, "models")
	const steps, save = 2000, 400
	c := newClusterWith(t, clusterOptions{Workers: 3, MaxRoles: objstoreMaxRoles, Jobs: jobs, Models: models, OwnHomes: true,
		DataRoots: joinURI(root, "datasets"), TemporalDB: pg.Database("temporal_compose")})
	if _, err := os.Stat(filepath.Join(c.home, "temporal", devserver.DBFile)); !os.IsNotExist(err) {
		t.Fatalf("stat %s: %v; want Temporal on PostgreSQL, no SQLite file", devserver.DBFile, err)
	}

	id := "compose_census"
	start := time.Now()
	res, err := waitJob(t, startUIStyle(t, c.st.Client, id, jobInput(id, data, objstoreCluster, steps, save)))
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, res.JobDir)
	t.Logf("PostgreSQL-backed Temporal, MinIO, 3 processes: accuracy %.4f at step %d in %s; roles ran in processes %v; published %s v%d",
		res.Metrics.Accuracy, res.GlobalStep, time.Since(start).Round(time.Millisecond), rolePIDs(evs), res.Model, res.Version)
	if res.JobDir != joinURI(jobs, id) || res.GlobalStep != steps {
		t.Fatalf("job dir %s at step %d, want %s at %d", res.JobDir, res.GlobalStep, joinURI(jobs, id), steps)
	}
	if res.Metrics.Accuracy < 0.84 {
		t.Fatalf("accuracy %.4f, want ≥ 0.84", res.Metrics.Accuracy)
	}
	if len(rolePIDs(evs)) < 2 {
		t.Fatalf("5 roles ran in processes %v, want at least 2", rolePIDs(evs))
	}
	c.checkHomes()

	// The published version, served by `trainflow serve` from MinIO.
	ctx, cancel := context.WithCancel(context.Background())
	addr := freeAddr(t)
	served := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		served <- runServe(ctx, nil, []string{"--models", models, "--cache", filepath.Join(t.TempDir(), "cache"), "--http", addr,
			"--poll", "100ms", "--log-level", "warn", "--console=false"}, &logs)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	instances, _ := heldOut(t, 16)
	body, _ := json.Marshal(map[string]any{"instances": instances})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Post("http://"+addr+"/v1/models/"+res.Model+":predict", "application/json", bytes.NewReader(body))
		if err == nil {
			var out struct {
				Predictions []map[string]any `json:"predictions"`
			}
			derr := json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && derr == nil {
				if len(out.Predictions) != len(instances) {
					t.Fatalf("%d predictions for %d instances", len(out.Predictions), len(instances))
				}
				if v := resp.Header.Get("X-Model-Version"); v != "1" {
					t.Fatalf("served version %q, want 1", v)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the model published to %s was not served within 60 s; serve logged:\n%s", models, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
