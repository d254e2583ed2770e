package beampipe

import "testing"

func TestStagesWorker(t *testing.T) {
	for _, c := range []struct {
		runner, endpoint, env string
		want                  bool
	}{
		{"", "", "", false},                   // in-process prism, LOOPBACK by default
		{"prism", "", "", false},              // same
		{"prism", "localhost:8073", "", true}, // a separate prism: DOCKER by default
		{"universal", "localhost:8073", "LOOPBACK", false},
		{"flink", "jm:8099", "loopback", false},
		{"flink", "jm:8099", "", true},
		{"flink", "jm:8099", "DOCKER", true},
		{"spark", "jm:8099", "PROCESS", true},
		{"dataflow", "", "", true},
		{"direct", "", "", false},
	} {
		if got := stagesWorker(c.runner, c.endpoint, c.env); got != c.want {
			t.Errorf("stagesWorker(%q, %q, %q) = %v, want %v", c.runner, c.endpoint, c.env, got, c.want)
		}
	}
}
