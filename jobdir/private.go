package jobdir

import (
	"path"
	"strings"
)

// A job directory's private files (ClusterDir: ReportKeyFile and each
// PSSecretFile) authenticate the job's own activities to its workflow
// and to each other. They are never data: no job, not even the job that
// owns them, may name one (or the directory holding them) as input, and
// the activities that check a spec's locations refuse every location
// IsPrivate or EndsInPrivateFile reports, after resolving symbolic links.

// IsPrivate reports whether key (slash separated, relative to a job
// directory) is ClusterDir or lies inside it. A pattern below ClusterDir
// ("cluster/*") is private too.
func IsPrivate(key string) bool {
	key = strings.TrimPrefix(path.Clean("/"+key), "/")
	return key == ClusterDir || strings.HasPrefix(key, ClusterDir+"/")
}

// EndsInPrivateFile reports whether p, a slash-separated path, key or
// URI path, ends in the key of a private file (ReportKeyFile or a
// PSSecretFile), whatever directory holds it: the test for a location
// whose job directory cannot be told (object storage outside the job
// root, a job directory from before claims). A ClusterDir of a job
// directory is IsPrivate's; this test alone lets a dataset keep a
// directory called cluster.
func EndsInPrivateFile(p string) bool {
	p = path.Clean("/" + p)
	dir, name := path.Split(p)
	if path.Base(dir) != ClusterDir {
		return false
	}
	return isPrivateName(name)
}

// isPrivateName reports whether name is the base name of a private file
// of ClusterDir: report.key or ps-<task>.secret.
func isPrivateName(name string) bool {
	if name == path.Base(ReportKeyFile) {
		return true
	}
	task, ok := strings.CutPrefix(name, "ps-")
	if !ok {
		return false
	}
	task, ok = strings.CutSuffix(task, ".secret")
	return ok && task != "" && strings.Trim(task, "0123456789") == ""
}
