package cli

import (
	"fmt"
	"strings"

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
