// Package train holds trainflow's models, optimizers, losses, metrics,
// checkpoint format and export bundles: plain Go on gonum, with no Temporal
// inside.
//
// Shapes: a batch X is row-major, n rows of Dim features; targets Y hold a
// class index (classifiers) or a value (regressors) per row. A model's
// variables live in one flat []float64 (Model.Params) so optimizers,
// checkpoints and parameter servers treat every model alike.
//
// Models (CheckpointMeta.Model names the type, CheckpointMeta.Spec the
// architecture, so a checkpoint rebuilds its model with Load):
//
//	linear_classifier               Linear: binary logistic or softmax regression
//	linear_regressor                Net without hidden layers, MSE
//	dnn_classifier, dnn_regressor   Net: ReLU layers, optional dropout, embeddings
//	dnn_linear_combined_classifier  Net: wide (linear) + deep part, logits summed
//	sequential_classifier,          Sequential: a layer stack (ModelSpec.Layers) on
//	sequential_regressor            flat rows or NHWC images (ModelSpec.InputShape)
//
// A sequential model's layers are JSON data, one kind per element:
//
//	[{"conv2d": {"filters": 32, "kernel": 3, "padding": "same", "activation": "relu"}},
//	 {"max_pool2d": {"size": 2}}, {"flatten": {}},
//	 {"dense": {"units": 128, "activation": "relu"}}, {"dropout": {"rate": 0.25}},
//	 {"dense": {"units": 10}}]
//
// with dense, conv2d (kernel n or [h, w], stride, same or valid padding),
// max_pool2d and avg_pool2d, flatten, dropout, layer_norm, activation
// (relu, tanh, sigmoid, gelu, linear) and embedding (integer ids to
// learned vectors, over the features only) layers; the last layer outputs the
// logits, 1 for a binary classifier or a regressor, k for k classes.
// Shapes are inferred layer by layer and checked before anything is
// allocated: a layer that does not fit its input is an ErrShape naming
// layers[i], its kind and both shapes. Convolutions run as im2col and the
// same matrix products as a Net, in float32 with ModelSpec.Float32.
//
// Optimizers: SGD with momentum, Adagrad, Adam and FTRL, with L1/L2
// regularisation; ClipByGlobalNorm clips gradients. Run trains any model
// resumably; Step is one training step for callers with their own loop
// (workers of a parameter-server cluster). Evaluate and Stream compute
// accuracy, log loss, AUC, precision, recall, RMSE and MAE over batches.
//
// Batch math goes through train/internal/kernel: row-major GEMM in float64
// and float32 (for a Net with ModelSpec.Float32, which computes its passes
// in float32 while variables and optimizer state stay float64), the Adam
// update and the precision conversions, in AVX2+FMA assembly where the CPU
// has it (Go elsewhere, or with TRAINFLOW_KERNELS=generic); products large
// enough are split across GOMAXPROCS cores on a bounded worker pool.
// Kernels names the implementation. Built with -tags openblas (cgo and
// Debian's libopenblas-dev), Gemm runs in OpenBLAS and Adam's update in AVX
// C instead; set OPENBLAS_NUM_THREADS=1 where several trainers share a
// machine. BLAS names the backend of a build. Training steps allocate
// nothing once the first batch has sized the scratch space.
package train
