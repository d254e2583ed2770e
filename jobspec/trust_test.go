package jobspec

import (
	"strings"
	"testing"
)

func TestValidateTrust(t *testing.T) {
	ok := []func(*JobSpec){
		func(s *JobSpec) { s.Data.BeamArgs = []string{"--parallelism=4", "-beam_strict"} },
		func(s *JobSpec) {
			s.Data.Runner, s.Data.BeamArgs = RunnerDataflow, []string{"--project=p", "--region=r", "--staging_location=gs://b/staging"}
		},
		func(s *JobSpec) { s.JobDir = "s3://bucket/jobs/x" },
		func(s *JobSpec) { s.JobDir = "/data/jobs/x..y" },
		func(s *JobSpec) { s.Data.Dir = "gs://b/census" },
		func(s *JobSpec) {
			s.Data.Train, s.Data.Eval = []string{"/data/a.csv", "file:///data/b.csv"}, []string{"relative/e.csv"}
		},
	}
	for i, f := range ok {
		s := trustSpec()
		f(&s)
		if err := s.ValidateTrust(); err != nil {
			t.Errorf("ok case %d: %v", i, err)
		}
	}
	bad := []struct {
		field string
		set   func(*JobSpec)
	}{
		{"data.beam_args[1]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--parallelism=2", "--environment_type=PROCESS"} }},
		{"data.beam_args[0]", func(s *JobSpec) { s.Data.BeamArgs = []string{`--environment_config={"command":"/bin/sh"}`} }},
		{"data.beam_args[0]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--runner=flink"} }},
		{"data.beam_args[0]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--endpoint=evil:8099"} }},
		{"data.beam_args[0]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--worker_binary=/tmp/x"} }},
		{"data.beam_args[0]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--sdk_harness_container_image_override=.*,evil"} }},
		{"data.beam_args[0]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--project=p"} }}, // Dataflow options need runner dataflow
		{"data.beam_args[1]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--parallelism", "4"} }},
		{"data.beam_args[0]", func(s *JobSpec) { s.Data.BeamArgs = []string{"--"} }},
		{"job_dir", func(s *JobSpec) { s.JobDir = "/data/jobs/../../var/tmp/x" }},
		{"job_dir", func(s *JobSpec) { s.JobDir = "s3://x/y?endpoint=http://127.0.0.1:9&anonymous=true" }},
		{"job_dir", func(s *JobSpec) { s.JobDir = "s3://x/a/%2e%2e/b" }},
		{"job_dir", func(s *JobSpec) { s.JobDir = "s3://key:secret@x/y" }},
		{"job_dir", func(s *JobSpec) { s.JobDir = "http://example.com/jobs" }},
		{"data.dir", func(s *JobSpec) { s.Data.Dir = "file://../etc" }},
		{"data.train[1]", func(s *JobSpec) { s.Data.Train = []string{"/data/a.csv", "gs://b/x?anonymous=true"} }},
		{"data.eval[0]", func(s *JobSpec) { s.Data.Eval = []string{"../../etc/passwd"} }},
	}
	for _, c := range bad {
		s := trustSpec()
		c.set(&s)
		err := s.ValidateTrust()
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want an error naming %s", s.Data.BeamArgs, err, c.field)
		}
	}
}

func trustSpec() JobSpec {
	return JobSpec{JobID: "trust_1", Data: DataSpec{Train: []string{"/data/t.csv"}, Eval: []string{"/data/e.csv"}}}.WithDefaults()
}
