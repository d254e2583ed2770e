package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	pathpkg "path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/trainflow/trainflow/internal/safefile"
	"github.com/trainflow/trainflow/internal/storage"
	"github.com/trainflow/trainflow/internal/temporalconn"
	"github.com/trainflow/trainflow/jobs"
	"github.com/trainflow/trainflow/jobspec"
	"github.com/trainflow/trainflow/mlapi"
)

// mlFlags are the ml/v1 REST API's flags, shared by serve and dev
// (docs/ml-api.md).
type mlFlags struct{ projects, packageRoots listFlag }

// register defines --ml-projects and --ml-package-roots on fs.
func (f *mlFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.projects, "ml-projects", "project IDs (comma-separated, repeatable) the ml/v1 API (Cloud ML Engine's /v1/projects/P/jobs, …:predict) serves; other projects are answered 404 (default: any project ID; docs/ml-api.md)")
	fs.Var(&f.packageRoots, "ml-package-roots", "directories or object-storage prefixes (comma-separated, repeatable; a staging bucket) whose trainer packages (.tar.gz) an ml/v1 job's trainingInput.packageUris may name (default: none, packageUris is refused; workers run packages only with --allow-packages)")
}

// check returns a usage error naming a project ID that cannot be one.
func (f *mlFlags) check() error {
	for _, p := range f.projects {
		if err := mlapi.ValidProject(p); err != nil {
			return usageError{fmt.Errorf("--ml-projects: %w", err)}
		}
	}
	for i, r := range f.packageRoots {
		if storage.IsURI(r) {
			st, err := storage.Open(context.Background(), r)
			if err != nil {
				return usageError{fmt.Errorf("--ml-package-roots %s: %w", r, err)}
			}
			st.Close()
			continue
		}
		abs, err := filepath.Abs(r)
		if err != nil {
			return usageError{fmt.Errorf("--ml-package-roots %s: %w", r, err)}
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return usageError{fmt.Errorf("--ml-package-roots %s: want a directory (%v)", r, err)}
		}
		f.packageRoots[i] = abs
	}
	return nil
}

// packages is the API's trainer package loader: an archive its
// --ml-package-roots hold (nil without roots: packageUris is refused).
func (f *mlFlags) packages() jobs.PackageLoader {
	if len(f.packageRoots) == 0 {
		return nil
	}
	roots := slices.Clone(f.packageRoots)
	return func(uri, module string) ([]byte, error) { return rootPackage(roots, uri, module) }
}

// rootPackage reads the trainer package uri (a .tar.gz, as gcloud staged
// it) from inside one of the operator's roots, checked to hold module:
// an object under a storage root's prefix, or a file under a local
// root's directory read without following links below the root (the
// root itself is the operator's) and bounded by jobspec.MaxPackageBytes.
// The uri is the client's, untrusted: any ".." or empty segment is
// refused, and nothing outside the roots is read.
func rootPackage(roots []string, uri, module string) ([]byte, error) {
	if !strings.HasSuffix(uri, ".tar.gz") {
		return nil, fmt.Errorf("want a source archive (.tar.gz, as `python -m build --sdist` or gcloud's staging makes it)")
	}
	path := strings.TrimPrefix(uri, "file://")
	var archive []byte
	var err error
	for _, root := range roots {
		local := !storage.IsURI(root)
		if local == storage.IsURI(path) {
			continue
		}
		prefix, _, _ := strings.Cut(root, "?") // a storage root's query is the operator's
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(prefix, "/")+"/")
		if !ok {
			continue
		}
		if !fs.ValidPath(rel) {
			return nil, fmt.Errorf("not a clean path inside %s (no '..', '.' or empty segments)", root)
		}
		if local {
			archive, err = readLocalPackage(root, rel)
		} else {
			archive, err = readStoredPackage(root, rel)
		}
		if err != nil {
			return nil, err
		}
		return stagedArchive(archive, module) // gcloud staged an sdist (trainer-0.1/…)
	}
	return nil, fmt.Errorf("not inside the package roots this server reads (its operator's --ml-package-roots)")
}

// readLocalPackage reads root/rel without following a link under root.
func readLocalPackage(root, rel string) ([]byte, error) {
	dir, name := pathpkg.Dir(rel), pathpkg.Base(rel)
	d, err := safefile.OpenDir(root, dir, safefile.Limits{File: jobspec.MaxPackageBytes})
	if err != nil {
		return nil, packageReadError(err)
	}
	defer d.Close()
	b, err := d.ReadFile(name)
	if err != nil {
		return nil, packageReadError(err)
	}
	return b, nil
}

// readStoredPackage reads the object rel under the storage prefix root,
// at most jobspec.MaxPackageBytes.
func readStoredPackage(root, rel string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := storage.Open(ctx, root)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	r, err := st.NewReader(ctx, rel)
	if err != nil {
		return nil, packageReadError(err)
	}
	defer r.Close()
	return readArchive(r)
}

// packageReadError says why a package was not read without naming paths
// of the server's beyond the client's own URI.
func packageReadError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no such package")
	case errors.Is(err, safefile.ErrTooLarge):
		return fmt.Errorf("larger than %d bytes, what a job may carry", jobspec.MaxPackageBytes)
	case errors.Is(err, safefile.ErrRefused):
		return fmt.Errorf("not a regular file of its own reached without links")
	}
	return err
}

// api is the ml/v1 API over cl, reading the models the server serves
// from models and answering predictions once the server is named
// (API.PredictWith).
func (f *mlFlags) api(cl client.Client, namespace string, models mlapi.Models, log *slog.Logger) *mlapi.API {
	return mlapi.New(mlapi.Options{Client: cl, Namespace: namespace, Projects: f.projects, Models: models, Packages: f.packages(), Logger: log})
}

// withML mounts the console's routes (nil: none) and the ml/v1 API's.
func withML(console func(*echo.Echo), api *mlapi.API) func(*echo.Echo) {
	return func(e *echo.Echo) {
		if console != nil {
			console(e)
		}
		api.Routes(e)
	}
}

// lazyTemporal is serve's Temporal client for the console and the ml/v1
// API, built from its --temporal flags (the home's user token on a
// loopback frontend): lazy, it connects on the first request that needs
// it, so that a Temporal that cannot be reached fails those requests
// while models and predictions work.
func lazyTemporal(tc temporalconn.Flags, log *slog.Logger) (client.Client, error) {
	if err := homeCredentials(&tc); err != nil {
		return nil, err
	}
	o, err := tc.Options(sdklog.NewStructuredLogger(log.With("component", "temporal-client")))
	if err != nil {
		return nil, usageError{fmt.Errorf("--temporal: %w", err)}
	}
	cl, err := client.NewLazyClient(o)
	if err != nil {
		return nil, fmt.Errorf("temporal client: %w", err)
	}
	return cl, nil
}
