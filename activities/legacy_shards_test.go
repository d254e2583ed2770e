package activities

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/workflows"
)

// legacyShards is a census job directory that trainflow wrote before
// shard format version 2, with the code of that time (spec("legacy_1")
// with 160 generated rows, prepare, then Train to step 20 with a
// checkpoint every 10 steps): job.json, the Transform, the manifest, two
// train shards and an eval shard of version 1 (float64 rows), and
// checkpoints 10 and 20 of the linear classifier. ckpt-40.want is the
// checkpoint the same code wrote resuming from step 20 to step 40.
const legacyShards = "testdata/legacy-shards-jobdir"

// copyJobDir copies the fixture at src into a temporary directory.
func copyJobDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "legacy_1")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestLegacyShardsTrainAndResume: a job directory of version 1 shards
// still trains: Train resumes from its checkpoint 20 and writes, at step
// 40, the very checkpoint the old code wrote, and Evaluate reads its eval
// shard. The same job directory with its shards rewritten in version 2
// (a quarter of the bytes or less) trains to the same checkpoint, so the
// compact format changes no result.
func TestLegacyShardsTrainAndResume(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(legacyShards, "ckpt-40.want"))
	if err != nil {
		t.Fatal(err)
	}
	mb, err := os.ReadFile(filepath.Join(legacyShards, preprocess.ManifestPath))
	if err != nil {
		t.Fatal(err)
	}
	var m preprocess.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	for _, compact := range []bool{false, true} {
		name := map[bool]string{false: "version 1", true: "rewritten as version 2"}[compact]
		t.Run(name, func(t *testing.T) {
			dir := copyJobDir(t, legacyShards)
			for _, s := range append(m.Train, m.Eval...) {
				p := filepath.Join(dir, preprocess.DataDir, s.Name)
				old, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if string(old[:8]) != "TFSHARD1" {
					t.Fatalf("fixture shard %s starts %q, want a version 1 shard", s.Name, old[:8])
				}
				if !compact {
					continue
				}
				var ex preprocess.Examples
				if err := preprocess.ReadShard(&ex, p); err != nil {
					t.Fatal(err)
				}
				if err := preprocess.WriteShard(p, &ex); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Stat(p); err != nil || fi.Size() > int64(len(old))/4 {
					t.Fatalf("%s rewritten: %v, %v; want at most a quarter of its %d bytes", s.Name, fi.Size(), err, len(old))
				}
			}
			acts := newActs(t)
			acts.InProcess = true
			e := env(acts)
			s := spec("legacy_1")
			in := workflows.TrainInput{JobDir: dir, Dim: m.Dim, Classes: m.Classes, TransformHash: m.TransformHash, Model: s.Model, Train: s.Train}
			in.Train.MaxSteps, in.Train.SaveCheckpointsSteps = 40, 10
			v, err := e.ExecuteActivity(acts.Train, in)
			if err != nil {
				t.Fatal(err)
			}
			var tr workflows.TrainResult
			v.Get(&tr)
			if tr.ResumedFrom != 20 || tr.Step != 40 {
				t.Fatalf("train %+v, want resumed from 20 to 40", tr)
			}
			got, err := os.ReadFile(filepath.Join(dir, "checkpoints", "ckpt-40"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("checkpoint 40 differs from the one the code of version 1 shards wrote")
			}
			v, err = e.ExecuteActivity(acts.Evaluate, workflows.EvaluateInput{JobDir: dir, Step: 40})
			if err != nil {
				t.Fatal(err)
			}
			var ev workflows.EvaluateResult
			v.Get(&ev)
			if ev.Metrics.Examples != m.EvalRows || ev.Metrics.Accuracy <= 0.5 {
				t.Fatalf("eval %+v, want %d examples better than chance", ev.Metrics, m.EvalRows)
			}
		})
	}
}
