package cli

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/labstack/echo/v4"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/trainflow/trainflow/internal/temporalconn"
	"github.com/trainflow/trainflow/mlapi"
)

// mlFlags are the ml/v1 REST API's flags, shared by serve and dev
// (docs/ml-api.md).
type mlFlags struct{ projects listFlag }

// register defines --ml-projects on fs.
func (f *mlFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.projects, "ml-projects", "project IDs (comma-separated, repeatable) the ml/v1 API (Cloud ML Engine's /v1/projects/P/jobs, …:predict) serves; other projects are answered 404 (default: any project ID; docs/ml-api.md)")
}

// check returns a usage error naming a project ID that cannot be one.
func (f *mlFlags) check() error {
	for _, p := range f.projects {
		if err := mlapi.ValidProject(p); err != nil {
			return usageError{fmt.Errorf("--ml-projects: %w", err)}
		}
	}
	return nil
}

// api is the ml/v1 API over cl, reading the models the server serves
// from models and answering predictions once the server is named
// (API.PredictWith).
func (f *mlFlags) api(cl client.Client, namespace string, models mlapi.Models, log *slog.Logger) *mlapi.API {
	return mlapi.New(mlapi.Options{Client: cl, Namespace: namespace, Projects: f.projects, Models: models, Logger: log})
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
