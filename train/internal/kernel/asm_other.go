//go:build !amd64 || purego

package kernel

// asm is nil: this build has no assembly kernels.
var asm *kernels
