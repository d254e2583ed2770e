package layers

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/trainflow/trainflow/"

// graph returns the import graph of pkg (relative to the module root) and
// its dependencies, with its tests' when tests is set, as `go list -deps`
// gives it.
func graph(t *testing.T, pkg string, tests bool) map[string][]string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, so the package graph cannot be listed")
	}
	args := []string{"list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`}
	if tests {
		args = append(args, "-test")
	}
	out, err := exec.Command(goCmd, append(args, "../../"+pkg)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", pkg, err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
	}
	return imports
}

// beamPackages returns the Apache Beam packages of g, sorted as go list
// lists them.
func beamPackages(g map[string][]string) []string {
	var out []string
	for p := range g {
		if strings.HasPrefix(p, "github.com/apache/beam/") {
			out = append(out, p)
		}
	}
	return out
}

// TestNoBeam fails when a package that must not link the Beam SDK depends
// on any github.com/apache/beam package, naming the import chain that
// brings it in. Beam belongs to the pipelines (preprocess/beampipe,
// serving/batchjob/batchbeam), which run in child processes, and to the
// binary.
func TestNoBeam(t *testing.T) {
	for _, c := range []struct {
		pkg   string
		tests bool // its tests must not link Beam either
		why   string
	}{
		{"workflows", true, "deterministic workflow code; `go test ./workflows` builds without Beam"},
		{"serving", true, "the prediction server; `go test ./serving` builds without Beam"},
		{"preprocess", true, "the Transform that training and serving share"},
		{"serving/batchjob", true, "the batch prediction request the activity writes"},
		{"activities", false, "activities run the pipelines in a child process"},
	} {
		t.Run(c.pkg, func(t *testing.T) {
			g := graph(t, c.pkg, c.tests)
			if _, ok := g[module+c.pkg]; !ok {
				t.Fatalf("go list did not list %s itself", module+c.pkg)
			}
			if beam := beamPackages(g); len(beam) > 0 {
				t.Errorf("%s (%s) depends on %d Beam packages: %s", c.pkg, c.why, len(beam), chain(g, roots(g, module+c.pkg), beam[0]))
			}
		})
	}
}

// TestBeamSeen is the control of TestNoBeam: the pipeline packages do
// depend on Beam, so an empty result there means the listing found it.
func TestBeamSeen(t *testing.T) {
	for _, pkg := range []string{"preprocess/beampipe", "serving/batchjob/batchbeam"} {
		g := graph(t, pkg, false)
		beam := beamPackages(g)
		if len(beam) == 0 {
			t.Fatalf("%s: no Beam package in its dependencies", pkg)
		}
		if c := chain(g, roots(g, module+pkg), beam[0]); !strings.Contains(c, " → ") {
			t.Errorf("%s: no import chain to %s: %q", pkg, beam[0], c)
		}
	}
}

// TestSpecsLinkNoStorage fails when jobspec or workflows links jobdir or
// internal/storage (and with it the object-storage SDKs): workflows are
// deterministic code without I/O, and jobspec is the pure contract they
// link. This is why jobspec, not jobdir, names the directories of a
// tuning job's children (jobspec.TrialDir, jobspec.SharedDataDir).
func TestSpecsLinkNoStorage(t *testing.T) {
	for _, pkg := range []string{"jobspec", "workflows"} {
		t.Run(pkg, func(t *testing.T) {
			g := graph(t, pkg, false)
			if _, ok := g[module+pkg]; !ok {
				t.Fatalf("go list did not list %s itself", module+pkg)
			}
			for _, bad := range []string{module + "jobdir", module + "internal/storage"} {
				if _, ok := g[bad]; ok {
					t.Errorf("%s depends on %s: %s", pkg, bad, chain(g, roots(g, module+pkg), bad))
				}
			}
		})
	}
}

// roots returns pkg and, in a graph listed with -test, its test variants
// ("pkg [pkg.test]", "pkg_test [pkg.test]", "pkg.test").
func roots(g map[string][]string, pkg string) []string {
	var out []string
	for p := range g {
		if p == pkg || p == pkg+".test" || strings.HasPrefix(p, pkg+" [") || strings.HasPrefix(p, pkg+"_test [") {
			out = append(out, p)
		}
	}
	return out
}

// chain returns an import path from one of the packages from to the
// package to, as "a → b → c", found breadth first in the import graph.
func chain(imports map[string][]string, from []string, to string) string {
	prev := map[string]string{}
	for _, f := range from {
		prev[f] = ""
	}
	queue := append([]string(nil), from...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append([]string{p}, path...)
			}
			return strings.Join(path, " → ")
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return to
}

// modulePackages lists every package of the module with its imports:
// the production ones, and those its tests add.
func modulePackages(t *testing.T) (imports, testImports map[string][]string) {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, so the package graph cannot be listed")
	}
	out, err := exec.Command(goCmd, "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	imports, testImports = map[string][]string{}, map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		imports[f[0]], testImports[f[0]] = strings.Fields(f[1]), strings.Fields(f[2])
	}
	return imports, testImports
}

// TestInternalIsTheGroundFloor fails when a package under internal/, or
// one of its tests, imports a package of the module outside internal/ (it
// would sit above what it serves: jobdir and jobs live at the top level
// for that reason, and a test of how internal/ code meets an upper
// package belongs to the upper package), or when a production package
// imports a test server of internal/testenv/ (only tests may start them).
func TestInternalIsTheGroundFloor(t *testing.T) {
	imports, testImports := modulePackages(t)
	const internal, testenv = module + "internal/", module + "internal/testenv/"
	above := func(pkg, imp string) bool {
		return strings.HasPrefix(pkg, internal) && strings.HasPrefix(imp, module) && !strings.HasPrefix(imp, internal)
	}
	var kits int
	for pkg, imps := range imports {
		for _, imp := range imps {
			if above(pkg, imp) {
				t.Errorf("%s imports %s: internal/ imports nothing above itself", pkg, imp)
			}
			if strings.HasPrefix(imp, testenv) && !strings.HasPrefix(pkg, testenv) {
				t.Errorf("%s (production code) imports the test server %s", pkg, imp)
			}
		}
		for _, imp := range testImports[pkg] {
			if above(pkg, imp) {
				t.Errorf("a test of %s imports %s: internal/ imports nothing above itself, in its tests either", pkg, imp)
			}
			if strings.HasPrefix(imp, testenv) {
				kits++
			}
		}
	}
	if len(imports) < 20 || kits == 0 {
		t.Fatalf("listed %d packages and %d test imports of internal/testenv: the listing is not the module's", len(imports), kits)
	}
}
