package activities

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/trainflow/trainflow/jobdir"
	"github.com/trainflow/trainflow/jobspec"

	"github.com/trainflow/trainflow/workflows"
)

// A job spec is untrusted; the worker's operator (the Activities fields,
// from flags and environment) is trusted. PrepareJob and Preprocess check
// every spec against the operator's configuration, whatever started it:
//
//   - data.dir, data.train, data.eval and job_dir lie inside a root: the
//     job root (Jobs, else Home/jobs) or one of DataRoots. Local paths are
//     cleaned and their symbolic links followed (for a job dir not yet
//     created, those of its nearest existing parent). A URI lies inside a
//     URI root of its scheme and bucket, under the root's prefix, and takes
//     the root's query parameters: a spec carries none.
//   - The Beam runner is the in-process default or one of BeamRunners; the
//     environment types DOCKER, PROCESS and EXTERNAL (which run code or
//     containers the spec names) only those of BeamEnvironments.

// jobRoot is the root of default job directories.
func (a *Activities) jobRoot() string {
	if a.Jobs != "" {
		return a.Jobs
	}
	return filepath.Join(a.Home, "jobs")
}

// InJobRoot reports whether the local path p (links resolved where they
// exist) lies in a's job root, and the root; never for a job root in
// object storage. (A function, not a method: every exported method of
// Activities is an activity.)
func InJobRoot(a *Activities, p string) (root string, in bool) {
	r, err := parseRoot(a.jobRoot())
	if err != nil || r.local == "" {
		return "", false
	}
	rp, err := resolveLocal(p)
	return r.local, err == nil && within(r.local, rp, false)
}

// refuseLocation is the non-retryable InvalidSpec error of a spec's
// location loc, naming its field and why (format, args).
func refuseLocation(field, loc, format string, args ...any) error {
	return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: %s %q: %s", jobspec.ErrInvalid, field, loc, fmt.Sprintf(format, args...)))
}

// root is one place jobs may read and write, resolved.
type root struct {
	// local: a resolved absolute directory (also for file:// roots).
	local string
	// scheme, bucket and prefix (no leading or trailing '/') of an object
	// storage root; query is its query, given to every location under it.
	scheme, bucket, prefix, query string
	isURI                         bool
	// shown is the root as errors name it: without its query.
	shown string
}

// roots resolves the job root and DataRoots, and with read also
// ReadRoots.
func (a *Activities) roots(read bool) ([]root, error) {
	var out []root
	all := append([]string{a.jobRoot()}, a.DataRoots...)
	if read {
		all = append(all, a.ReadRoots...)
	}
	for _, s := range all {
		if s == "" {
			continue
		}
		r, err := parseRoot(s)
		if err != nil {
			return nil, fmt.Errorf("root %s: %w", s, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRoot(s string) (root, error) {
	if !isURI(s) {
		p, err := resolveLocal(s)
		return root{local: p, shown: p}, err
	}
	u, err := url.Parse(s)
	if err != nil {
		return root{}, err
	}
	r := root{scheme: strings.ToLower(u.Scheme), query: u.RawQuery, isURI: true}
	r.shown, _, _ = strings.Cut(s, "?")
	if r.scheme == "file" {
		r.local, err = resolveLocal(fileURIPath(u))
		return r, err
	}
	r.bucket, r.prefix = u.Host, strings.Trim(path.Clean("/"+u.Path), "/")
	return r, nil
}

// fileURIPath is the local path of a file:// URI (jobdir.FilePath).
func fileURIPath(u *url.URL) string { return jobdir.FilePath(u) }

// resolveLocal makes p absolute and clean and follows its symbolic links;
// the part of p that does not exist yet is kept as is, after its nearest
// existing parent resolved.
func resolveLocal(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	cur, rest := p, ""
	for {
		_, err := os.Lstat(cur)
		if err == nil {
			r, err := filepath.EvalSymlinks(cur)
			if err != nil {
				return "", err
			}
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// within reports whether the clean absolute path p is dir or inside it
// (strictly inside when strict).
func within(dir, p string, strict bool) bool {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return false
	}
	return rel != "." || !strict
}

// locate returns where the spec's location loc (field names it in errors)
// is for this worker: a local path resolved, or a storage URI with its
// root's query. Outside every root it fails for good. A job directory
// (strict) must lie strictly inside a root, not be one.
func (a *Activities) locate(field, loc string, strict bool) (string, error) {
	return a.locateIn(field, loc, strict, false)
}

// locateData is locate for data a job only reads (data.dir, data.train,
// data.eval, bless.eval_data, input_paths): inside the job root,
// DataRoots or ReadRoots, and in no job directory (checkJobFiles): a
// spec names data, not a job's files.
func (a *Activities) locateData(field, loc string) (string, error) {
	return a.locateDataOf(field, loc, "")
}

// locateDataOf is locateData for a step of the job whose directory is own
// (as locate returns it; "" for none): data may also lie among the job's
// own files (the rows PrepareJob generated), its private files excepted.
func (a *Activities) locateDataOf(field, loc, own string) (string, error) {
	out, err := a.locateIn(field, loc, false, true)
	if err != nil {
		return "", err
	}
	if err := a.checkJobFiles(field, loc, out, own); err != nil {
		return "", err
	}
	return out, nil
}

// checkJobFiles refuses, for good and naming field, a data location (loc
// as the spec spells it, located as locate resolved it: symbolic links
// followed) that lies
//
//   - in a job's private files, whichever job's, own included: inside
//     the cluster/ of a job directory (jobdir.IsPrivate), or ending in a
//     private file's key anywhere (jobdir.EndsInPrivateFile), or a
//     pattern that may match one in object storage;
//   - inside a job directory other than own. A local job directory is a
//     directory holding a claim (jobdir.ClaimFile) or any directory
//     directly inside a local job root; in object storage, the first
//     level below a job root URI. (Job directories a spec put in a data
//     root in object storage are not told apart here: that costs a
//     request per parent, and their private files are refused by name.)
//
// The reason for the rule: a job's outputs, bad records and served model
// are its own; data read from another job's directory would carry that
// job's files (its report key, its parameter servers' secrets) to
// whoever can query the model or read the outputs.
func (a *Activities) checkJobFiles(field, loc, located, own string) error {
	refuse := func(format string, args ...any) error { return refuseLocation(field, loc, format, args...) }
	const private = "a job's private files (report key, parameter-server secrets) are never data"
	other := func(dir string) error {
		if own == "" {
			return refuse("inside the job directory %s; a job reads only its own files and the data roots", dir)
		}
		return refuse("inside the job directory %s of another job; a job reads only its own files and the data roots", dir)
	}
	if p, ok := localOf(located); ok {
		if jobdir.EndsInPrivateFile(filepath.ToSlash(p)) {
			return refuse("%s", private)
		}
		if o, ok := localOf(own); ok && within(o, p, false) {
			if rel, _ := filepath.Rel(o, p); jobdir.IsPrivate(filepath.ToSlash(rel)) {
				return refuse("inside this job's %s/: %s", jobdir.ClusterDir, private)
			}
			return nil
		}
		dir := a.localJobDir(p)
		if dir == "" {
			return nil
		}
		if rel, _ := filepath.Rel(dir, p); jobdir.IsPrivate(filepath.ToSlash(rel)) {
			return refuse("inside %s of the job directory %s: %s", jobdir.ClusterDir, dir, private)
		}
		return other(dir)
	}
	u, err := url.Parse(located)
	if err != nil {
		return refuse("not a URI: %v", err)
	}
	scheme, bucket, key := strings.ToLower(u.Scheme), u.Host, strings.Trim(path.Clean("/"+u.Path), "/")
	if jobdir.EndsInPrivateFile(key) || path.Base(path.Dir(key)) == jobdir.ClusterDir && strings.ContainsAny(path.Base(key), `*?[\`) {
		return refuse("%s", private)
	}
	inside := func(dir, key string) (string, bool) {
		if dir == "" {
			return key, true
		}
		rel, ok := strings.CutPrefix(key, dir+"/")
		return rel, ok
	}
	if o, err := url.Parse(own); own != "" && err == nil && strings.EqualFold(o.Scheme, scheme) && o.Host == bucket {
		if rel, ok := inside(strings.Trim(path.Clean("/"+o.Path), "/"), key); ok {
			if jobdir.IsPrivate(rel) {
				return refuse("inside this job's %s/: %s", jobdir.ClusterDir, private)
			}
			return nil
		}
	}
	r, err := parseRoot(a.jobRoot())
	if err != nil || !r.isURI || r.local != "" || r.scheme != scheme || r.bucket != bucket {
		return nil
	}
	rel, ok := inside(r.prefix, key)
	name, rest, deeper := strings.Cut(rel, "/")
	if !ok || !deeper { // not below the job root, or a file beside its job directories
		return nil
	}
	dir := scheme + "://" + path.Join(bucket, r.prefix, name)
	if jobdir.IsPrivate(rest) {
		return refuse("inside %s of the job directory %s: %s", jobdir.ClusterDir, dir, private)
	}
	return other(dir)
}

// localOf returns the local path of a location as locate returns it (a
// resolved path, or a file:// URI of one), and false for object storage
// or "".
func localOf(located string) (string, bool) {
	if located == "" {
		return "", false
	}
	if !isURI(located) {
		return located, true
	}
	u, err := url.Parse(located)
	if err != nil || !strings.EqualFold(u.Scheme, "file") {
		return "", false
	}
	return fileURIPath(u), true
}

// localJobDir returns the job directory that the resolved local path p is
// or lies in, or "": the nearest of p and its parents that holds a claim
// (jobdir.ClaimFile) or is a directory directly inside the local job
// root.
func (a *Activities) localJobDir(p string) string {
	jobs := ""
	if r, err := parseRoot(a.jobRoot()); err == nil {
		jobs = r.local
	}
	for q := p; ; q = filepath.Dir(q) {
		parent := filepath.Dir(q)
		if parent == q {
			return ""
		}
		if parent == jobs { // a directory (or a name yet to be one), not a file beside them
			if fi, err := os.Stat(q); err == nil && !fi.IsDir() {
				return ""
			}
			return q
		}
		if fi, err := os.Stat(filepath.Join(q, jobdir.ClaimFile)); err == nil && fi.Mode().IsRegular() {
			return q
		}
	}
}

func (a *Activities) locateIn(field, loc string, strict, read bool) (string, error) {
	refuse := func(format string, args ...any) error { return refuseLocation(field, loc, format, args...) }
	roots, err := a.roots(read)
	if err != nil {
		return "", err
	}
	outside := func() error {
		shown := make([]string, len(roots))
		for i, r := range roots {
			shown[i] = r.shown
		}
		flags := "worker --jobs and --data-roots"
		if read {
			flags = "worker --jobs, --data-roots and --read-roots"
		}
		return refuse("outside the directories and buckets this worker lets jobs use (%s; %s)", strings.Join(shown, ", "), flags)
	}
	var u *url.URL
	local := loc
	if isURI(loc) {
		if u, err = url.Parse(loc); err != nil {
			return "", refuse("not a URI: %v", err)
		}
		if u.User != nil || u.Fragment != "" {
			return "", refuse("user information and fragments are not allowed")
		}
		if !strings.EqualFold(u.Scheme, "file") {
			bucket, key := u.Host, strings.Trim(path.Clean("/"+u.Path), "/")
			if slices.Contains(strings.Split(u.Path, "/"), "..") {
				return "", refuse("'..' is not allowed")
			}
			for _, r := range roots {
				if !r.isURI || r.local != "" || !strings.EqualFold(u.Scheme, r.scheme) || bucket != r.bucket {
					continue
				}
				if r.prefix != "" && key != r.prefix && !strings.HasPrefix(key, r.prefix+"/") || strict && key == r.prefix {
					continue
				}
				if u.RawQuery != "" && u.RawQuery != r.query {
					return "", refuse("query parameters come from the worker's root %s, not from a job spec", r.shown)
				}
				out := r.scheme + "://" + bucket + "/" + key
				if r.query != "" {
					out += "?" + r.query
				}
				return out, nil
			}
			return "", outside()
		}
		local = fileURIPath(u)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(local), "/"), "..") {
		return "", refuse("'..' is not allowed")
	}
	p, err := resolveLocal(local)
	if err != nil {
		return "", refuse("%v", err)
	}
	for _, d := range a.Private {
		if rd, err := resolveLocal(d); err == nil && within(rd, p, false) {
			return "", refuse("inside the worker's private directory %s (its keys): never a job's to read or write", rd)
		}
	}
	for _, r := range roots {
		if r.local == "" || !within(r.local, p, strict) {
			continue
		}
		if u == nil {
			return p, nil
		}
		if u.RawQuery != "" && u.RawQuery != r.query {
			return "", refuse("query parameters come from the worker's root %s, not from a job spec", r.shown)
		}
		out := "file://" + filepath.ToSlash(p)
		if r.query != "" {
			out += "?" + r.query
		}
		return out, nil
	}
	return "", outside()
}

// checkBeamArgs checks the Beam pipeline options of a job's preprocessing
// (jobspec.DataSpec.BeamFlags) against the operator's configuration: each
// a typed field's flag or a jobspec.BeamArgAllowed option, the runner the
// in-process default or one of BeamRunners, the environment LOOPBACK or one
// of BeamEnvironments.
func (a *Activities) checkBeamArgs(args []string) error {
	refuse := func(format string, v ...any) error {
		return nonRetryable(workflows.ErrTypeInvalidSpec, fmt.Errorf("%w: %s", jobspec.ErrInvalid, fmt.Sprintf(format, v...)))
	}
	set := map[string]string{}
	for _, arg := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		if !strings.HasPrefix(arg, "-") || name == "" {
			return refuse("data.beam_args: %q is not a --name=value option", arg)
		}
		if !ok {
			value = "true"
		}
		set[name] = value
	}
	runner := strings.ToLower(set["runner"])
	for name := range set {
		switch name {
		case "runner", "endpoint", "environment_type", "environment_config", "job_name":
		default:
			if !jobspec.BeamArgAllowed(name, runner) {
				return refuse("data.beam_args sets --%s, which a job spec may not set", name)
			}
		}
	}
	if runner != jobspec.RunnerInProcess && !containsFold(a.BeamRunners, runner) {
		return refuse("data.runner %q is not allowed by this worker (allowed: the in-process default%s; the operator allows more with worker --beam-runners)", runner, also(a.BeamRunners))
	}
	if runner == jobspec.RunnerInProcess && set["endpoint"] != "" {
		return refuse("data.runner_endpoint needs data.runner")
	}
	env := strings.ToUpper(set["environment_type"])
	if env == "" && set["environment_config"] != "" {
		env = jobspec.EnvDocker // the portable runners' default
	}
	if env != "" && env != jobspec.EnvLoopback && !containsFold(a.BeamEnvironments, env) {
		return refuse("data.environment_type %s is not allowed by this worker: it runs a command or container the job names (allowed: LOOPBACK%s; the operator allows more with worker --beam-environments)", env, also(a.BeamEnvironments))
	}
	return nil
}

// also lists what else the operator allows, for an error message.
func also(allowed []string) string {
	if len(allowed) == 0 {
		return ""
	}
	return ", " + strings.Join(allowed, ", ")
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(e string) bool { return strings.EqualFold(e, s) })
}

// checkPreprocess checks a Preprocess input again, whatever workflow
// version built it: its Beam options, and its job directory and inputs
// inside the roots, the inputs in no job directory but its own and never
// among private files (checkJobFiles).
func (a *Activities) checkPreprocess(in workflows.PreprocessInput) error {
	if err := a.checkBeamArgs(in.BeamArgs); err != nil {
		return err
	}
	own, err := a.locate("job_dir", in.JobDir, false)
	if err != nil {
		return err
	}
	for _, split := range []struct {
		field string
		files []string
	}{{"data.train", in.Request.Train}, {"data.eval", in.Request.Eval}} {
		for i, f := range split.files {
			if _, err := a.locateDataOf(fmt.Sprintf("%s[%d]", split.field, i), f, own); err != nil {
				return err
			}
		}
	}
	return nil
}

// enclosingJob returns the directory of a job that the job directory dir
// (as locate returns it) lies inside, or "": a job spec must not put its
// job directory among another job's outputs.
func enclosingJob(ctx context.Context, dir string) (string, error) {
	return jobdir.Enclosing(ctx, dir, jobdir.ClaimFile)
}
