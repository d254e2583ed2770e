package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/internal/testenv/miniotest"
	"github.com/trainflow/trainflow/jobdir"
)

// objstoreCluster is the cluster of the object-storage tests: a CUSTOM job
// of 5 roles (chief, 2 workers, 2 parameter servers) on processes that
// run at most 3 roles each.
const (
	objstoreCluster        = `{"scale_tier":"CUSTOM","worker_count":2,"parameter_server_count":2,"update":"async","heartbeat_timeout_secs":4}`
	objstoreSteps          = 4000
	objstoreSave           = 400
	objstoreMaxRoles       = 3
	objstoreKillAfterSteps = 1200
)

// TestDistributedJobSharesOnlyObjectStorage runs distributed jobs on three
// `trainflow worker` processes that share no disk: each has its own
// --home, and --jobs puts the job dirs (and the raw data) in object
// storage that the processes reach only through internal/storage: a
// file:// bucket directory outside every home, and MinIO over s3:// when a
// `minio` binary is on PATH or MINIO_ENDPOINT is set. A first job runs
// undisturbed; in a second, the process running the chief is killed with
// SIGKILL mid-training and not restarted, and the job completes on the
// other two. The same job on one process with a local job dir gives the
// time to compare with.
func TestDistributedJobSharesOnlyObjectStorage(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		runSharedOnly(t, "file://"+filepath.ToSlash(t.TempDir())+"/bucket")
	})
	t.Run("minio", func(t *testing.T) {
		root, err := miniotest.Use(t).Prefix("objstore") // the worker processes inherit its credentials
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if st, err := storage.Open(context.Background(), root); err == nil {
				st.DeleteAll(context.Background(), "")
				st.Close()
			}
		})
		runSharedOnly(t, root)
	})
	t.Run("local", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the single-process baseline only gives a time to compare with")
		}
		c := newClusterWith(t, clusterOptions{Workers: 1, OwnHomes: true})
		start := time.Now()
		res, err := waitJob(t, startUIStyle(t, c.st.Client, "local_only", distributedInput(t, "local_only", objstoreCluster, objstoreSteps, objstoreSave)))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("1 process, local job dir %s: accuracy %.4f at step %d in %s", res.JobDir, res.Metrics.Accuracy, res.GlobalStep, time.Since(start).Round(time.Millisecond))
		if res.GlobalStep != objstoreSteps {
			t.Fatalf("ended at step %d, want %d", res.GlobalStep, objstoreSteps)
		}
	})
}

// runSharedOnly runs the undisturbed and the disturbed job with job dirs
// and data under the storage URI root.
func runSharedOnly(t *testing.T, root string) {
	data := uploadCensus(t, root)
	jobs := joinURI(root, "jobs")
	c := newClusterWith(t, clusterOptions{Workers: 3, MaxRoles: objstoreMaxRoles, Jobs: jobs, OwnHomes: true, DataRoots: joinURI(root, "datasets")})

	id := "shared_only"
	start := time.Now()
	res, err := waitJob(t, startUIStyle(t, c.st.Client, id, jobInput(id, data, objstoreCluster, objstoreSteps, objstoreSave)))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	evs := events(t, res.JobDir)
	commits := checkCommits(t, evs)
	t.Logf("3 processes, job dir %s: accuracy %.4f at step %d in %s; commits %v; roles ran in processes %v",
		res.JobDir, res.Metrics.Accuracy, res.GlobalStep, took.Round(time.Millisecond), commits, rolePIDs(evs))
	if res.JobDir != joinURI(jobs, id) {
		t.Fatalf("job dir %s, want %s", res.JobDir, joinURI(jobs, id))
	}
	if res.GlobalStep != objstoreSteps || commits[len(commits)-1] != objstoreSteps {
		t.Fatalf("ended at step %d (commits %v), want %d", res.GlobalStep, commits, objstoreSteps)
	}
	if res.Metrics.Accuracy < 0.85 {
		t.Fatalf("accuracy %.4f, want ≥ 0.85", res.Metrics.Accuracy)
	}
	if len(rolePIDs(evs)) < 2 {
		t.Fatalf("5 roles ran in processes %v, want at least 2 (each runs at most %d)", rolePIDs(evs), objstoreMaxRoles)
	}
	checkJobDir(t, res.JobDir, res.Export)
	c.checkHomes()

	id = "shared_only_kill"
	start = time.Now()
	run := startUIStyle(t, c.st.Client, id, jobInput(id, data, objstoreCluster, objstoreSteps, objstoreSave))
	p := c.waitStep(id, objstoreKillAfterSteps)
	chief := -1
	for _, ev := range events(t, joinURI(jobs, id)) {
		if w, ok := ev.Record.(*jobdir.WorkerStart); ok && w.Task == 0 {
			chief = slices.IndexFunc(c.procs, func(p *exec.Cmd) bool { return p.Process.Pid == w.PID })
		}
	}
	if chief < 0 {
		t.Fatal("no worker process runs the chief")
	}
	cs, _ := c.clusterState(id)
	t.Logf("SIGKILL process %d (pid %d, runs the chief; parameter servers %+v) at committed step %d, for good", chief, c.procs[chief].Process.Pid, cs.PS, p.GlobalStep)
	c.kill(chief)
	res, err = waitJob(t, run)
	if err != nil {
		t.Fatal(err)
	}
	evs = events(t, res.JobDir)
	commits = checkCommits(t, evs)
	_, retried, maxLost := faults(evs)
	t.Logf("after the kill: accuracy %.4f at step %d in %s on 2 processes; %d worker retries, most steps lost %d; commits %v",
		res.Metrics.Accuracy, res.GlobalStep, time.Since(start).Round(time.Millisecond), retried, maxLost, commits)
	if res.GlobalStep != objstoreSteps || commits[len(commits)-1] != objstoreSteps {
		t.Fatalf("ended at step %d (commits %v), want %d", res.GlobalStep, commits, objstoreSteps)
	}
	if retried == 0 {
		t.Fatal("no worker was retried: the kill did not hit the chief")
	}
	if maxLost > objstoreSave {
		t.Fatalf("a restart lost %d steps, more than one checkpoint interval (%d)", maxLost, objstoreSave)
	}
	if res.Metrics.Accuracy < 0.85 {
		t.Fatalf("accuracy %.4f, want ≥ 0.85", res.Metrics.Accuracy)
	}
	checkJobDir(t, res.JobDir, res.Export)
	c.checkHomes()
}

// joinURI returns the location elem inside the storage URI dir, keeping
// dir's query at the end.
func joinURI(dir, elem string) string {
	base, query, ok := strings.Cut(dir, "?")
	if ok {
		return base + "/" + elem + "?" + query
	}
	return base + "/" + elem
}

// uploadCensus copies the UCI Adult files to root/datasets and returns the
// DataSpec (JSON) that reads them from there; without them, one that
// generates rows (which the job writes into its job dir).
func uploadCensus(t *testing.T, root string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(censusDir, "adult.data")); err != nil {
		t.Logf("UCI Adult not in %s: training on generated rows", censusDir)
		return `{"generated_rows":20000}`
	}
	ctx := context.Background()
	dir := joinURI(root, "datasets")
	st, err := storage.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, name := range []string{"adult.data", "adult.test"} {
		f, err := os.Open(filepath.Join(censusDir, name))
		if err != nil {
			t.Fatal(err)
		}
		err = st.WriteFunc(ctx, name, func(w io.Writer) error {
			_, err := io.Copy(w, f)
			return err
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	spec, _, _ := strings.Cut(dir, "?") // the worker's --data-roots gives the query
	return fmt.Sprintf(`{"dir":%q}`, spec)
}

// rolePIDs returns the processes that ran the job's roles.
func rolePIDs(evs []jobdir.Event) []int {
	var pids []int
	for _, ev := range evs {
		var p int
		switch r := ev.Record.(type) {
		case *jobdir.PSStart:
			p = r.PID
		case *jobdir.WorkerStart:
			p = r.PID
		default:
			continue
		}
		if !slices.Contains(pids, p) {
			pids = append(pids, p)
		}
	}
	slices.Sort(pids)
	return pids
}

// checkJobDir checks, through internal/storage only, that the job dir holds
// the final checkpoint behind its pointer, the manifest and the published
// bundle with its metadata.
func checkJobDir(t *testing.T, jobDir, bundle string) {
	t.Helper()
	ctx := context.Background()
	st, err := storage.Open(ctx, jobDir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.ReadPointer(ctx, "checkpoints/checkpoint"); err != nil || p != fmt.Sprintf("checkpoints/ckpt-%d", objstoreSteps) {
		t.Fatalf("checkpoint pointer names %q (%v), want ckpt-%d", p, err, objstoreSteps)
	}
	for _, key := range []string{"job.json", "data/manifest.json", "transform/transform.json", "eval/metrics.jsonl"} {
		if ok, err := st.Exists(ctx, key); !ok || err != nil {
			t.Fatalf("%s: no %s (%v)", jobDir, key, err)
		}
	}
	b, err := storage.Open(ctx, bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ok, err := b.Exists(ctx, "metadata.json"); !ok || err != nil {
		t.Fatalf("published bundle %s has no metadata.json (%v)", bundle, err)
	}
}

// checkHomes checks that the worker processes wrote nothing but their
// cache and model repository into their homes, and no job dir anywhere
// on local disk.
func (c *cluster) checkHomes() {
	c.t.Helper()
	for _, home := range append([]string{c.home}, c.homes...) {
		if _, err := os.Stat(filepath.Join(home, "jobs")); err == nil {
			c.t.Fatalf("%s/jobs exists: a job dir on local disk", home)
		}
	}
	for i, home := range c.homes {
		ents, _ := os.ReadDir(home)
		for _, e := range ents {
			if e.Name() != "cache" && e.Name() != "models" {
				c.t.Fatalf("process %d wrote %s into its home", i, filepath.Join(home, e.Name()))
			}
		}
	}
}
