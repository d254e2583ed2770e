package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/trainflow/trainflow/internal/ident"
)

// ErrRegistry marks a registry file that cannot be used.
var ErrRegistry = errors.New("app: bad applications file")

// Application is one program the operator registered.
type Application struct {
	// Name is what a spec's application.name says (the rule of names:
	// letters, digits and '_', starting with a letter).
	Name string `json:"-"`
	// Argv is the command's prefix; a job's args follow it. Argv[0] is an
	// absolute path.
	Argv []string `json:"argv"`
	// Dir is the working directory; "" means the replica's workspace.
	Dir string `json:"dir,omitempty"`
	// Env names the variables passed through from the worker's
	// environment; nothing else of it is.
	Env []string `json:"env,omitempty"`
	// Sandbox runs the program in the sandbox (the worker's Wrapper).
	Sandbox bool `json:"sandbox,omitempty"`
	// TFConfigChief names the chief in TF_CONFIG: "chief" (default) or
	// "master".
	TFConfigChief string `json:"tf_config_chief,omitempty"`
}

// Registry is the operator's applications by name. The zero value and nil
// hold none.
type Registry struct {
	apps map[string]Application
}

// registryFile is the file's shape.
type registryFile struct {
	Applications map[string]Application `json:"applications"`
}

// LoadRegistry reads the registry file at path.
func LoadRegistry(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRegistry, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRegistry, err)
	}
	r, err := ParseRegistry(b, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ParseRegistry decodes a registry file (see the package documentation),
// strictly: unknown keys, a name that breaks the rule of names, a relative
// argv[0], and a bad tf_config_chief are errors wrapping ErrRegistry. A
// relative dir is relative to base, the file's directory (an error if
// base is "").
func ParseRegistry(b []byte, base string) (*Registry, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f registryFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRegistry, err)
	}
	r := &Registry{apps: map[string]Application{}}
	for name, a := range f.Applications {
		a.Name = name
		if a.Dir != "" && !filepath.IsAbs(a.Dir) && base != "" {
			a.Dir = filepath.Join(base, a.Dir)
		}
		if err := a.check(); err != nil {
			return nil, fmt.Errorf("%w: applications.%s: %w", ErrRegistry, name, err)
		}
		if a.TFConfigChief == "" {
			a.TFConfigChief = RoleChief
		}
		r.apps[name] = a
	}
	return r, nil
}

func (a Application) check() error {
	if err := ident.Check(a.Name); err != nil {
		return err
	}
	if len(a.Argv) == 0 || !filepath.IsAbs(a.Argv[0]) {
		return errors.New("argv: want an absolute program path first")
	}
	if a.Dir != "" && !filepath.IsAbs(a.Dir) {
		return fmt.Errorf("dir %q: want an absolute path", a.Dir)
	}
	for _, e := range a.Env {
		if e == "" || bytes.ContainsAny([]byte(e), "=\x00") {
			return fmt.Errorf("env %q: want a variable name", e)
		}
	}
	if a.TFConfigChief != "" && a.TFConfigChief != RoleChief && a.TFConfigChief != RoleMaster {
		return fmt.Errorf("tf_config_chief %q: want chief or master", a.TFConfigChief)
	}
	return nil
}

// Lookup returns the application called name.
func (r *Registry) Lookup(name string) (Application, bool) {
	if r == nil {
		return Application{}, false
	}
	a, ok := r.apps[name]
	a.Argv, a.Env = slices.Clone(a.Argv), slices.Clone(a.Env)
	return a, ok
}

// Names lists the registered applications, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	names := make([]string, 0, len(r.apps))
	for n := range r.apps {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Command is the command of a replica of a: the registered argv prefix
// followed by the job's args verbatim.
func (a Application) Command(args []string) []string {
	return append(slices.Clone(a.Argv), args...)
}

// Sandboxed reports whether an application of r is registered with
// "sandbox": true (the worker then needs a sandbox).
func (r *Registry) Sandboxed() bool {
	if r == nil {
		return false
	}
	for _, a := range r.apps {
		if a.Sandbox {
			return true
		}
	}
	return false
}
