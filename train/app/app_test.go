package app

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestTFConfigExact(t *testing.T) {
	job := JobInfo{ScaleTier: "CUSTOM", WorkerCount: 2, ParameterServerCount: 1, Application: "a", Args: []string{"--x=1"}, JobDir: "/jobs/j"}
	withEvaluator := job
	withEvaluator.EvaluatorCount = 1
	c := Cluster{Chief: []string{"h:1"}, Worker: []string{"h:2", "h:3"}, PS: []string{"h:4"}}
	for _, tc := range []struct {
		c     Cluster
		task  Task
		chief string
		trial string
		job   JobInfo
		want  string
	}{
		{Cluster{Chief: []string{"h:1"}}, Task{RoleChief, 0}, RoleChief, "", JobInfo{ScaleTier: "BASIC", PythonModule: "trainer.task"}, // a package job
			`{"cluster":{"chief":["h:1"]},"task":{"type":"chief","index":0,"trial":""},"job":{"scale_tier":"BASIC","worker_count":"0","parameter_server_count":"0","python_module":"trainer.task","args":[],"job_dir":""},"environment":"cloud"}`},
		{Cluster{Chief: []string{"h:1"}}, Task{RoleChief, 0}, RoleMaster, "", JobInfo{ScaleTier: "BASIC", PythonModule: "trainer.task", PackageURIs: []string{"gs://b/trainer-0.1.tar.gz"},
			Region: "us-central1", RuntimeVersion: "1.15", PythonVersion: "3.7", JobDir: "gs://b/out"}, // a package job as Cloud ML Engine's runtime 1.15 ran it
			`{"cluster":{"master":["h:1"]},"task":{"type":"master","index":0,"trial":""},"job":{"scale_tier":"BASIC","worker_count":"0","parameter_server_count":"0","package_uris":["gs://b/trainer-0.1.tar.gz"],"python_module":"trainer.task","args":[],"job_dir":"gs://b/out","region":"us-central1","runtime_version":"1.15","python_version":"3.7"},"environment":"cloud"}`},
		{c, Task{RoleWorker, 1}, RoleChief, "3", job,
			`{"cluster":{"chief":["h:1"],"worker":["h:2","h:3"],"ps":["h:4"]},"task":{"type":"worker","index":1,"trial":"3"},"job":{"scale_tier":"CUSTOM","worker_count":"2","parameter_server_count":"1","application":"a","args":["--x=1"],"job_dir":"/jobs/j"},"environment":"cloud"}`},
		{c, Task{RoleChief, 0}, RoleMaster, "", job,
			`{"cluster":{"master":["h:1"],"worker":["h:2","h:3"],"ps":["h:4"]},"task":{"type":"master","index":0,"trial":""},"job":{"scale_tier":"CUSTOM","worker_count":"2","parameter_server_count":"1","application":"a","args":["--x=1"],"job_dir":"/jobs/j"},"environment":"cloud"}`},
		{c, Task{RoleEvaluator, 0}, RoleChief, "", withEvaluator,
			`{"cluster":{"chief":["h:1"],"worker":["h:2","h:3"],"ps":["h:4"]},"task":{"type":"evaluator","index":0,"trial":""},"job":{"scale_tier":"CUSTOM","worker_count":"2","parameter_server_count":"1","evaluator_count":"1","application":"a","args":["--x=1"],"job_dir":"/jobs/j"},"environment":"cloud"}`},
	} {
		got, err := TFConfig(tc.c, tc.task, tc.trial, tc.job, tc.chief)
		if err != nil || got != tc.want {
			t.Errorf("TFConfig(%v, %s):\n got %s (%v)\nwant %s", tc.task, tc.chief, got, err, tc.want)
		}
	}
	if _, err := TFConfig(c, Task{"boss", 0}, "", job, RoleChief); err == nil {
		t.Error("task type boss accepted")
	}
}

func TestEnvFromScratch(t *testing.T) {
	a := Application{Name: "a", Argv: []string{"/bin/true"}, Env: []string{"KEEP", "TF_CONFIG", "ABSENT"}}
	r := Replica{JobID: "j", Trial: "2", Task: Task{RoleWorker, 1}, Cluster: Cluster{Chief: []string{"10.0.0.1:2222"}, Worker: []string{"x:1", "x:2"}, PS: []string{"p:1"}},
		ModelDir: "/m", CheckpointDir: "/c", TensorBoardDir: "/t", Workspace: "/w"}
	worker := map[string]string{"KEEP": "k", "SECRET": "s", "TF_CONFIG": "forged"}
	env, err := Env(a, r, func(k string) (string, bool) { v, ok := worker[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("%s set twice", k)
		}
		got[k] = v
	}
	want := map[string]string{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "2222", "WORLD_SIZE": "3", "RANK": "2", "LOCAL_RANK": "0",
		"AIP_MODEL_DIR": "/m", "AIP_CHECKPOINT_DIR": "/c", "AIP_TENSORBOARD_LOG_DIR": "/t", "CLOUD_ML_HP_METRIC_FILE": "/w/output.metrics",
		"CLOUD_ML_JOB_ID": "j", "CLOUD_ML_TRIAL_ID": "2", "TRAINFLOW_REPLICA": "worker-1", "KEEP": "k", "PATH": DefaultPath, "HOME": "/w"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["SECRET"]; ok {
		t.Error("a variable the operator did not pass through reached the program")
	}
	if !strings.Contains(got["TF_CONFIG"], `"task":{"type":"worker","index":1,"trial":"2"}`) {
		t.Errorf("TF_CONFIG %s: the worker's own TF_CONFIG overrode trainflow's", got["TF_CONFIG"])
	}
	r.Task = Task{RolePS, 0}
	env, _ = Env(a, r, func(string) (string, bool) { return "", false })
	for _, kv := range env {
		if strings.HasPrefix(kv, "RANK=") || strings.HasPrefix(kv, "WORLD_SIZE=") {
			t.Errorf("parameter server got %s", kv)
		}
	}
}

func TestParseRegistry(t *testing.T) {
	r, err := ParseRegistry([]byte(`{"applications":{"t":{"argv":["/usr/bin/python3","x.py"],"env":["A"],"dir":"t"}}}`), "/srv")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := r.Lookup("t")
	if !ok || a.Name != "t" || a.Dir != "/srv/t" || a.TFConfigChief != RoleChief || strings.Join(a.Command([]string{"a;b", "$(x)"}), " ") != "/usr/bin/python3 x.py a;b $(x)" {
		t.Errorf("Lookup(t) = %+v, %v", a, ok)
	}
	if _, ok := r.Lookup("u"); ok {
		t.Error("an unregistered name was found")
	}
	for _, bad := range []string{
		`{"applications":{"t":{"argv":["python3"]}}}`,
		`{"applications":{"t":{"argv":["/bin/x"],"shell":true}}}`,
		`{"applications":{"1t":{"argv":["/bin/x"]}}}`,
		`{"applications":{"t":{"argv":["/bin/x"],"dir":"rel"}}}`,
		`{"applications":{"t":{"argv":["/bin/x"],"env":["A=B"]}}}`,
		`{"applications":{"t":{"argv":["/bin/x"],"tf_config_chief":"boss"}}}`,
	} {
		if _, err := ParseRegistry([]byte(bad), ""); !errors.Is(err, ErrRegistry) {
			t.Errorf("ParseRegistry(%s) = %v, want ErrRegistry", bad, err)
		}
	}
}

func TestReadMetrics(t *testing.T) {
	in := `{"global_step": "1000", "my_metric_tag": "0.987", "timestamp": 1525851440.123456, "trial": "0"}

{"global_step": 2000, "accuracy": 0.5, "trial": "1", "checkpoint_path": ""}
{"global_step": "30`
	ms, err := ReadMetrics(strings.NewReader(in))
	if err != nil || len(ms) != 2 {
		t.Fatalf("ReadMetrics = %+v, %v", ms, err)
	}
	if ms[0].Step != 1000 || ms[0].Values["my_metric_tag"] != 0.987 || ms[0].Trial != "0" || ms[1].Values["accuracy"] != 0.5 {
		t.Errorf("got %+v", ms)
	}
	if l, _ := Latest(ms); l.Step != 2000 {
		t.Errorf("Latest step %d", l.Step)
	}
	if _, err := ReadMetrics(strings.NewReader("{\"global_step\": \"x\"}\n")); !errors.Is(err, ErrMetrics) {
		t.Errorf("bad line: %v", err)
	}
}

func TestProcessExitsAndLog(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		script    string
		success   bool
		retryable bool
		tail      string
	}{
		{`echo out; echo err >&2; exit 0`, true, false, "out\nerr\n"},
		{`echo boom >&2; exit 3`, false, false, "boom\n"},
		{`exit 75`, false, true, ""},
		{`kill -9 $$`, false, true, ""},
		{`echo "HOME=$HOME SECRET=$SECRET"`, true, false, "HOME=/w SECRET=\n"},
	} {
		log := filepath.Join(dir, "l"+strconv.Itoa(len(tc.script))+".log")
		os.Setenv("SECRET", "s")
		p, err := Start(Command{Argv: []string{"/bin/sh", "-c", tc.script}, Env: []string{"HOME=/w"}, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		ex := p.Wait()
		if ex.Success() != tc.success || ex.Retryable() != tc.retryable || ex.Tail != tc.tail {
			t.Errorf("%q: %v success %v retryable %v tail %q", tc.script, ex, ex.Success(), ex.Retryable(), ex.Tail)
		}
		if b, _ := os.ReadFile(log); string(b) != tc.tail {
			t.Errorf("%q: log %q, want %q", tc.script, b, tc.tail)
		}
	}
}

// TestRestartedLogSeparator: a replica restarted in a new generation
// appends to its log after a separator line (Command.Header), so the log
// does not run from one generation's "step 120" into the next's "step
// 130" unmarked (issue #43).
func TestRestartedLogSeparator(t *testing.T) {
	log := filepath.Join(t.TempDir(), "worker-0.log")
	for _, c := range []Command{
		{Argv: []string{"/bin/sh", "-c", "echo step 120; kill -9 $$"}, Log: log},
		{Argv: []string{"/bin/sh", "-c", "echo step 130"}, Log: log, Header: "=== generation 2 ==="},
	} {
		p, err := Start(c)
		if err != nil {
			t.Fatal(err)
		}
		p.Wait()
	}
	if b, _ := os.ReadFile(log); string(b) != "step 120\n=== generation 2 ===\nstep 130\n" {
		t.Errorf("log %q, want the generation's separator between the runs", b)
	}
}

func TestLogCap(t *testing.T) {
	log := filepath.Join(t.TempDir(), "l.log")
	p, err := Start(Command{Argv: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 100 ]; do echo 0123456789; i=$((i+1)); done"}, Log: log, LogBytes: 55})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	b, _ := os.ReadFile(log)
	if !strings.HasPrefix(string(b), strings.Repeat("0123456789\n", 5)) || !strings.Contains(string(b), "cap reached") || len(b) > 200 {
		t.Errorf("capped log = %q", b)
	}
}

// TestStopKillsTheGroup: a program that ignores SIGTERM and has a child
// of its own: Stop kills both after the grace period.
func TestStopKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	ready := filepath.Join(dir, "ready")
	p, err := Start(Command{Argv: []string{"/bin/sh", "-c", `trap '' TERM; sleep 300 & echo $! > ` + pidFile + `; touch ` + ready + `; wait`}, Log: filepath.Join(dir, "l.log")})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the program never started its child")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := os.ReadFile(pidFile)
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	start := time.Now()
	ex := p.Stop(200 * time.Millisecond)
	if !ex.Stopped || ex.Signal == "" {
		t.Errorf("Stop: %+v", ex)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("Stop took %v: SIGKILL before the grace period", d)
	}
	if live := GroupMembers(p.PID()); len(live) > 0 {
		t.Errorf("process group %d still has live members %v", p.PID(), live)
	}
	if Alive(child) {
		t.Errorf("child %d outlived Stop", child)
	}
}

// TestStopTerminate: a Command's Terminate is how Stop asks the program
// to end; the program ends within the grace period, unkilled.
func TestStopTerminate(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	asked := 0
	p, err := Start(Command{Argv: []string{"/bin/sh", "-c", `trap 'exit 0' USR1; touch ` + ready + `; while :; do sleep 0.05; done`}, Log: filepath.Join(dir, "l.log"),
		Terminate: func(pid int) error { asked++; return syscall.Kill(pid, syscall.SIGUSR1) }})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !fileExists(ready); {
		if time.Now().After(deadline) {
			t.Fatal("the program never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ex := p.Stop(time.Minute)
	if asked != 1 || ex.Signal != "" || ex.Code != 0 || !ex.Stopped {
		t.Errorf("Stop with Terminate: asked %d, exit %+v; want the program's own exit 0", asked, ex)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
