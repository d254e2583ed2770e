package serving

import (
	"context"
	"log/slog"
	"time"

	"github.com/trainflow/trainflow/bundle"
)

// Mirror syncs src (a repository in object storage) into dst (a local one)
// every interval until ctx is done, with bundle.Sync, and reloads reg (a
// Registry over dst) after every sync that changed dst. A failed sync is
// logged and retried at the next tick; the versions already mirrored keep
// serving.
func Mirror(ctx context.Context, src, dst *bundle.Store, reg *Registry, interval time.Duration, log *slog.Logger) {
	log = log.With("component", "mirror")
	every(ctx, interval, func() {
		changed, err := bundle.Sync(ctx, src, dst)
		if err != nil && ctx.Err() == nil {
			log.Error("sync models", "store", src.Location(), "error", err)
		}
		if !changed {
			return
		}
		if err := reg.Reload(); err != nil {
			log.Error("reload models", "error", err)
		}
	})
}
