package cli

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// envRead lists the environment variables the trainflow binary reads.
var envRead = []string{"TRAINFLOW_HOME", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TLS", "TRAINFLOW_SERVER",
	"TRAINFLOW_TEMPORAL_DB", "TRAINFLOW_API_KEY_FILE",
	// Read by the AWS SDK behind s3:// storage URLs.
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}

// TestComposeFile loads docker-compose.yml with the compose-spec loader
// (which validates it against the schema) and checks that every trainflow
// service runs a real subcommand with real flags, reads only environment
// variables the binary knows, and starts after what it needs.
func TestComposeFile(t *testing.T) {
	root := ".."
	if _, err := loadCompose(root, types.Mapping{}); err == nil || !strings.Contains(err.Error(), "deploy/make-env.sh") {
		t.Fatalf("docker-compose.yml loads with no .env (%v): credentials must come from .env, and the error say how to make it", err)
	}
	env := makeEnv(t, root)
	p, err := loadCompose(root, env)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	// AllServices includes those in profiles (the CLI), inactive by default.
	names := p.AllServices()
	var all []types.ServiceConfig
	for _, n := range sortedKeys(names) {
		all = append(all, names[n])
	}
	for _, want := range []string{"postgresql", "temporal", "minio", "minio-setup", "worker", "serve", "cli"} {
		if _, ok := names[want]; !ok {
			t.Errorf("service %s is missing", want)
		}
	}
	ours := 0
	for _, s := range all {
		if s.Image != "trainflow:dev" {
			if !strings.Contains(s.Image, ":") || strings.HasSuffix(s.Image, ":latest") {
				t.Errorf("service %s: image %q is not pinned to a tag", s.Name, s.Image)
			}
			continue
		}
		ours++
		// The binary's own parser judges the command: with -h appended it
		// exits 0 only if the subcommand and every flag before -h exist.
		args := append(slices.Clone([]string(s.Command)), "-h")
		if code, _, errs := cli(t, args...); code != exitOK {
			t.Errorf("service %s: command %q is not a valid trainflow command line: %s", s.Name, s.Command, strings.TrimSpace(errs))
		}
		for k := range s.Environment {
			if !slices.Contains(envRead, k) {
				t.Errorf("service %s: environment variable %s is not read by trainflow", s.Name, k)
			}
		}
		if _, ok := s.DependsOn["temporal"]; !ok && s.Name != "serve" && s.Name != "temporal" {
			t.Errorf("service %s does not wait for temporal", s.Name)
		}
	}
	if ours < 4 {
		t.Fatalf("%d trainflow services, want temporal, worker, serve and cli", ours)
	}
	// Temporal is trainflow's authorizing server, not an open one: it
	// takes the workers' token from the secret the workers present, the
	// users' from theirs, and the CLI presents a user's.
	tc := names["temporal"].Command
	if len(tc) == 0 || tc[0] != "temporal-server" || flagValue(tc, "--worker-tokens") != "/run/secrets/worker.token" || flagValue(tc, "--user-tokens") != "/run/secrets/user.tokens" {
		t.Errorf("temporal command %q, want temporal-server with --worker-tokens and --user-tokens from secrets", tc)
	}
	if k := flagValue(names["worker"].Command, "--api-key-file"); k != "/run/secrets/worker.token" {
		t.Errorf("worker --api-key-file %q, want the secret /run/secrets/worker.token", k)
	}
	secretsOf := func(n string) map[string]string {
		m := map[string]string{}
		for _, s := range names[n].Secrets {
			if s.Mode == nil || *s.Mode&0o077 != 0 {
				t.Errorf("service %s: secret %s has mode %v, want 0400", n, s.Source, s.Mode)
			}
			m[s.Source] = s.Target
		}
		return m
	}
	for n, want := range map[string]map[string]string{
		"temporal": {"worker_token": "worker.token", "user_tokens": "user.tokens"},
		"worker":   {"result_keys": "results.key", "worker_token": "worker.token"},
		"cli":      {"user_token": "user.token"},
		"serve":    {},
	} {
		if got := secretsOf(n); !maps.Equal(got, want) {
			t.Errorf("service %s secrets %v, want %v", n, got, want)
		}
	}
	if v := names["cli"].Environment["TRAINFLOW_API_KEY_FILE"]; v == nil || *v != "/run/secrets/user.token" {
		t.Errorf("cli TRAINFLOW_API_KEY_FILE %v, want the user's token secret", v)
	}
	if c := names["temporal"].DependsOn["postgresql"].Condition; c != types.ServiceConditionHealthy {
		t.Errorf("temporal starts on postgresql %q, want service_healthy", c)
	}
	if names["worker"].Build == nil {
		t.Error("worker does not build the image from the Dockerfile")
	}
	if c := names["worker"].DependsOn["minio-setup"].Condition; c != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("worker starts on minio-setup %q, want the bucket created first (service_completed_successfully)", c)
	}
	if c := names["minio-setup"].DependsOn["minio"].Condition; c != types.ServiceConditionHealthy {
		t.Errorf("minio-setup starts on minio %q, want service_healthy", c)
	}
	// The worker publishes to the model repository the server reads, in
	// MinIO, and no disk is shared.
	wm, sm := flagValue(names["worker"].Command, "--models"), flagValue(names["serve"].Command, "--models")
	if !strings.HasPrefix(wm, "s3://") || wm != sm {
		t.Errorf("worker publishes to --models %q, serve reads --models %q; want the same s3:// URI", wm, sm)
	}
	if c := names["serve"].DependsOn["minio-setup"].Condition; c != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("serve starts on minio-setup %q, want the bucket created first (service_completed_successfully)", c)
	}
	// Workers, and only they, hold the result key, from a secret only
	// their user may read (the secrets' table above).
	if k := flagValue(names["worker"].Command, "--result-keys"); k != "/run/secrets/results.key" {
		t.Errorf("worker --result-keys %q, want the secret /run/secrets/results.key", k)
	}
	for _, n := range []string{"worker", "serve"} {
		if v := names[n].Volumes; len(v) > 0 {
			t.Errorf("service %s mounts %v, want no shared disk", n, v)
		}
	}
}

// loadCompose loads docker-compose.yml as `docker compose` would with env
// as the .env file's variables.
func loadCompose(root string, env types.Mapping) (*types.Project, error) {
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		return nil, err
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: "docker-compose.yml", Content: b}},
		Environment: env,
	}, func(o *loader.Options) { o.SetProjectName("trainflow", true) })
}

// makeEnv runs deploy/make-env.sh, as docs/deployment.md says to, and parses the
// .env it prints.
func makeEnv(t *testing.T, root string) types.Mapping {
	t.Helper()
	out, err := exec.Command("sh", filepath.Join(root, "deploy", "make-env.sh")).Output()
	if err != nil {
		t.Fatalf("deploy/make-env.sh: %v", err)
	}
	env := types.Mapping{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = v
		}
	}
	for _, k := range []string{"POSTGRES_PASSWORD", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "TRAINFLOW_S3_ACCESS_KEY", "TRAINFLOW_S3_SECRET_KEY"} {
		if len(env[k]) < 12 {
			t.Fatalf("make-env.sh gives %s=%q, want a generated secret", k, env[k])
		}
	}
	return env
}

// TestComposeSecrets checks what docker-compose.yml exposes: every
// published port on 127.0.0.1 by default, every password and key from
// .env, and workers and the server holding the bucket-scoped MinIO user,
// not the root account.
func TestComposeSecrets(t *testing.T) {
	root := ".."
	env := makeEnv(t, root)
	delete(env, "TRAINFLOW_BIND")
	p, err := loadCompose(root, env)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]bool{}
	for _, v := range env {
		secrets[v] = true
	}
	published := 0
	for name, s := range p.AllServices() {
		for _, port := range s.Ports {
			published++
			if port.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes %s on %q, want 127.0.0.1 by default", name, port.Published, port.HostIP)
			}
		}
		for k, v := range s.Environment {
			secretName := strings.Contains(k, "PASSWORD") || strings.Contains(k, "PWD") || strings.Contains(k, "SECRET") || strings.HasSuffix(k, "_KEY") || strings.HasSuffix(k, "KEY_ID")
			if secretName && (v == nil || !secrets[*v]) {
				t.Errorf("service %s: %s is not taken from .env", name, k)
			}
		}
	}
	if published < 4 {
		t.Fatalf("%d published ports, want Temporal, the UI, MinIO and the server", published)
	}
	for _, n := range []string{"worker", "serve"} {
		e := p.AllServices()[n].Environment
		if id := e["AWS_ACCESS_KEY_ID"]; id == nil || *id != env["TRAINFLOW_S3_ACCESS_KEY"] || *id == env["MINIO_ROOT_USER"] {
			t.Errorf("service %s uses MinIO access key %v, want the bucket-scoped user %s", n, id, env["TRAINFLOW_S3_ACCESS_KEY"])
		}
		if _, ok := e["MINIO_ROOT_PASSWORD"]; ok {
			t.Errorf("service %s is given MinIO's root password", n)
		}
	}
	// An operator may publish on another interface, on purpose.
	env["TRAINFLOW_BIND"] = "0.0.0.0"
	if p, err = loadCompose(root, env); err != nil || p.AllServices()["serve"].Ports[0].HostIP != "0.0.0.0" {
		t.Fatalf("TRAINFLOW_BIND=0.0.0.0 not honoured (%v)", err)
	}
}

// flagValue returns the argument after flag name in a command line, or "".
func flagValue(cmd []string, name string) string {
	if i := slices.Index(cmd, name); i >= 0 && i+1 < len(cmd) {
		return cmd[i+1]
	}
	return ""
}

// TestComposeCheckCanFail shows the flag check rejects a wrong flag.
func TestComposeCheckCanFail(t *testing.T) {
	if code, _, _ := cli(t, "worker", "--temporall", "x:1", "-h"); code != exitUsage {
		t.Fatalf("misspelt flag: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := cli(t, "serve", "--models", "/data", "-h"); code != exitOK {
		t.Fatalf("valid flags: exit %d, want %d", code, exitOK)
	}
}
