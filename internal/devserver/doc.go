// Package devserver runs a single-process Temporal development server, with
// the Temporal Web UI, inside the calling program.
//
// Start brings up the four Temporal services (frontend, history, matching,
// worker) in process, backed by one SQLite file, Options.Home/temporal.db,
// so workflow histories and visibility records survive a restart. It returns
// only once the frontend answers health checks, the namespace is
// registered and the requested custom search attributes exist, so callers
// can dial a client and start workflows immediately.
//
// Everything listens on loopback: the frontend on the IP of
// Options.FrontendAddr, the internal services and their membership ports on
// 127.0.0.1 with ports picked at random, and the Web UI, when
// Options.UIAddr is set, on that address. No metrics or pprof port is
// opened and archival is disabled.
//
// # Storage
//
// The SQLite file uses write-ahead logging (journal_mode=WAL) with
// synchronous=NORMAL: a committed transaction survives the process being
// killed (Ctrl-C, SIGKILL); only an operating system crash or power loss can
// lose the last few commits, and never corrupts the file. The schema is
// created on first use. The namespace is created on first use with a
// retention of 30 days (Retention); an existing namespace is left as it is.
//
// Only one Server may use a Home at a time; Start takes an exclusive lock on
// Home/temporal.lock (on Unix) and returns ErrHomeInUse when it is held.
//
// # Search attributes
//
// On SQLite, custom search attributes are per-namespace aliases of a fixed
// set of pre-allocated columns (for example ten Keyword and three Double
// columns). Start adds the missing ones through the OperatorService and
// fails if a name already exists with another type, since that cannot be
// changed in place.
//
// # Logging
//
// Server logs at Warn and above are forwarded to Options.Logger with the
// attribute component=temporal; Debug and Info are dropped. While the
// server starts only Error and above are forwarded, and once Stop begins
// nothing is: both phases produce bursts of expected, harmless warnings and
// errors (connections to services not yet listening or already gone).
// Start and Stop themselves log one Info record each with
// component=devserver.
//
// # Restarts
//
// Stop checkpoints the write-ahead log into DBFile. The SQLite plugin keeps
// its connection to the file open until the process exits (it never closes
// pooled connections), so a later Start in the same process reuses it.
// Start clears the cluster_membership table, which only holds gossip seeds
// of the previous run: left in place, a restart within 20 s of a stop would
// leave the matching service out of the ring for about 45 s.
package devserver
