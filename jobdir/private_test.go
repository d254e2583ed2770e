package jobdir

import "testing"

func TestPrivateKeys(t *testing.T) {
	for _, c := range []struct {
		key          string
		private, end bool
	}{
		{ClusterDir, true, false},
		{ReportKeyFile, true, true},
		{PSSecretFile(0), true, true},
		{PSSecretFile(17), true, true},
		{"cluster/other", true, false},
		{"cluster/*", true, false},
		{"./cluster//report.key", true, true},
		{"/jobs/x/cluster/report.key", false, true},
		{"bucket/ds/cluster/ps-3.secret", false, true},
		{"cluster/ps-.secret", true, false},
		{"cluster/ps-1x.secret", true, false},
		{"clusters/report.key", false, false},
		{"raw/train.csv", false, false},
		{"data/cluster.csv", false, false},
		{"report.key", false, false},
	} {
		if got := IsPrivate(c.key); got != c.private {
			t.Errorf("IsPrivate(%q) = %v, want %v", c.key, got, c.private)
		}
		if got := EndsInPrivateFile(c.key); got != c.end {
			t.Errorf("EndsInPrivateFile(%q) = %v, want %v", c.key, got, c.end)
		}
	}
}
