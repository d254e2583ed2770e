// Package dist trains one model on several workers with parameter servers
// (data parallelism, as in TensorFlow's between-graph replication).
//
// The model's flat variables are split into contiguous shards (Range), one
// per parameter server. A Shard holds its slice with the optimizer state
// for it and applies gradients: in async mode each gradient as it arrives,
// in sync mode the mean of Replicas gradients tagged with the current step
// (more workers than Replicas are backups: a straggler's late gradient is
// dropped). With backups, shard 0 admits or drops each gradient first and
// only admitted ones go to the other shards (Client.PushAdmitted), so every
// shard averages the same workers at every step. Servers speak gRPC (service trainflow.dist.ParameterServer,
// methods Pull, Push, Snapshot, Cursor and Finish) with the binary codec in
// wire.go.
//
// A worker (RunWorker) pulls the variables, computes the gradient of its
// next batch and pushes it, with its data position, to every shard. A
// worker whose model computes in float32 (train.Float32Model) keeps its
// variables, batch and gradient in float32 and they travel so (Pull32,
// Push32: see wire.go); the shards stay float64. With Overlap (async) the
// push of one gradient and the pull after it run while the next gradient
// is computed. With LocalSteps (local SGD with periodic averaging) a
// worker instead takes LocalSteps optimizer steps on its own copy of the
// variables, with its own optimizer, between a pull and a push of the
// delta of its variables (PushDelta, same message as a gradient with its
// step count); the shards add it divided by the workers (async) or the
// mean of the step's deltas (sync) and advance the global step by
// LocalSteps. Shard
// 0 records the position with the update, so positions and variables are
// checkpointed together and a restarted worker continues where its last
// counted batch ended. Worker 0, the chief, commits checkpoints
// (Snapshot of every shard, Assemble, Checkpoints.Save) each time the
// global step passes a multiple of the save interval, and at the end.
//
// Failures: the workers find the parameter servers through a Resolver (the
// training workflow, told by each server when it starts). A restarted
// server restores the newest committed checkpoint and the cluster
// generation grows; every request carries the generation the worker
// knows, so the other shards roll back to the same checkpoint on their next
// request, and workers of an older generation are refused
// (codes.FailedPrecondition) until they refresh and re-read their
// positions; so is a push that waited at a checkpoint cut while its shard
// rolled back. Lost work is bounded by the checkpoint interval. After the
// final commit the chief refreshes its view of the cluster until every
// shard has heard Finish (a chief stalled through a restart still holds
// the old one).
//
// Peers are not trusted (auth.go): every connection opens with a mutual
// challenge–response over fresh nonces from both ends, proving to each
// side that the other holds the server's secret without sending it; the
// Resolver hands the workers the secrets beside the addresses, and they
// never travel through the workflow. A worker sends nothing past its
// hello to a server that fails the proof; a server also refuses worker
// IDs outside the cluster, NaN or infinite gradients, generations the
// cluster (its own Resolver) has not reached, and messages larger than a
// gradient of its shard. A worker whose loss or gradient stops being
// finite ends with train.ErrNonFinite instead of pushing it, and the chief
// never commits a checkpoint holding a NaN or an infinity.
package dist
