package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/trainflow/trainflow/jobspec"

	"github.com/trainflow/trainflow/train/app"
)

// packagePath packs the Python package of `jobs submit training
// --package-path DIR --module-name MODULE` (app.Pack: gcloud's three
// shapes of DIR) and checks, before anything is submitted, that MODULE is
// in it, so a typo fails here and not on every replica. The archive is
// what the job carries to the workers (at most app.MaxArchiveBytes).
func packagePath(dir, module string) ([]byte, error) {
	if module == "" {
		return nil, fmt.Errorf("--package-path %s: --module-name is required (e.g. trainer.task)", dir)
	}
	archive, err := app.Pack(dir)
	if err != nil {
		return nil, fmt.Errorf("--package-path %s: %w", dir, err)
	}
	ok, err := app.PackageHasModule(archive, module)
	if err != nil {
		return nil, fmt.Errorf("--module-name %s: %w", module, err)
	}
	if !ok {
		return nil, fmt.Errorf("--module-name %s: no %s.py (or %s/__main__.py) in --package-path %s",
			module, modulePath(module), modulePath(module), dir)
	}
	return archive, nil
}

// modulePath is module's file path without extension (trainer.task → trainer/task).
func modulePath(module string) string { return strings.ReplaceAll(module, ".", "/") }

// configPackage is the package of a config.yaml's trainingInput.packageUris
// (jobs.LoadSpecPackages): a local directory, packed as --package-path
// packs it, or a source archive (.tar.gz) as `python -m build --sdist`
// or gcloud made it, checked to hold module.
func configPackage(uri, module string) ([]byte, error) {
	if strings.Contains(uri, "://") {
		return nil, fmt.Errorf("want a local directory or .tar.gz (the CLI does not fetch packages from object storage; the ml/v1 API reads them from its operator's --ml-package-roots)")
	}
	st, err := os.Stat(uri)
	if err != nil {
		return nil, fmt.Errorf("a local package directory or .tar.gz (object storage is not read for packages): %w", err)
	}
	if st.IsDir() {
		return packagePath(uri, module)
	}
	f, err := os.Open(uri)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	archive, err := readArchive(f)
	if err == nil {
		archive, err = stagedArchive(archive, module)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	return archive, nil
}

// readArchive reads a package archive from r, at most what a job may
// carry (jobspec.MaxPackageBytes).
func readArchive(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, jobspec.MaxPackageBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > jobspec.MaxPackageBytes {
		return nil, fmt.Errorf("larger than %d bytes, what a job may carry", jobspec.MaxPackageBytes)
	}
	return b, nil
}

// stagedArchive is a staged package archive (an sdist as setuptools and
// gcloud make it, one trainer-0.1/ directory; or trainflow's layout) in
// the layout workers install (app.FromSdist), checked to hold module.
// config.yaml's packageUris and the ml/v1 API's both take it so.
func stagedArchive(archive []byte, module string) ([]byte, error) {
	archive, err := app.FromSdist(archive)
	if err != nil {
		return nil, err
	}
	ok, err := app.PackageHasModule(archive, module)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no module %s (pythonModule) in it", module)
	}
	return archive, nil
}
