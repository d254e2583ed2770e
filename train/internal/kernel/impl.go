package kernel

import (
	"math"
	"os"
)

// EnvKernels is the environment variable that forces the portable
// kernels when set to "generic"; any other value (or none) lets the CPU
// decide.
const EnvKernels = "TRAINFLOW_KERNELS"

// kernels is one implementation of the package's functions.
type kernels struct {
	name string
	s    gemmKernel[float32]
	d    gemmKernel[float64]
	// adam, narrow, widen and add do a prefix of their slices and
	// return its length; the Go loops finish the rest.
	adam   func(p, g, m, v []float64, b1, b2, lr, s, eps float64) int
	narrow func(dst []float32, src []float64) int
	widen  func(dst []float64, src []float32) int
	add    func(dst, src []float32) int
}

// generic is the portable implementation: a 2×4 micro-kernel in Go.
var generic = kernels{
	name:   "generic",
	s:      gemmKernel[float32]{f: microGo[float32], mr: 2, nr: 4, kc: 256, mc: 64},
	d:      gemmKernel[float64]{f: microGo[float64], mr: 2, nr: 4, kc: 256, mc: 64},
	adam:   func(p, g, m, v []float64, b1, b2, lr, s, eps float64) int { return 0 },
	narrow: func([]float32, []float64) int { return 0 },
	widen:  func([]float64, []float32) int { return 0 },
	add:    func([]float32, []float32) int { return 0 },
}

// impl is the implementation in use, chosen at start.
var impl = choose(os.Getenv(EnvKernels))

// choose returns the generic kernels if env is "generic" or the CPU lacks
// what the assembly needs, else the assembly.
func choose(env string) *kernels {
	if env != "generic" && asm != nil {
		return asm
	}
	return &generic
}

// Impl names the implementation in use: "avx2" or "generic".
func Impl() string { return impl.name }

// microGo is the generic micro-kernel, 2×4 with the tile in locals: the
// largest tile that the Go compiler keeps in registers (4×4 spills and
// runs at half the speed).
func microGo[T Float](k int, a, b []T, ldb int, c []T, ldc int, alpha, beta T) {
	a = a[:2*k]
	var c00, c01, c02, c03, c10, c11, c12, c13 T
	for p := range k {
		ap, bp := a[2*p:2*p+2:2*p+2], b[ldb*p:ldb*p+4:ldb*p+4]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		a0, a1 := ap[0], ap[1]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	r0, r1 := c[:4:4], c[ldc:ldc+4:ldc+4]
	if beta == 0 {
		r0[0], r0[1], r0[2], r0[3] = alpha*c00, alpha*c01, alpha*c02, alpha*c03
		r1[0], r1[1], r1[2], r1[3] = alpha*c10, alpha*c11, alpha*c12, alpha*c13
		return
	}
	r0[0], r0[1], r0[2], r0[3] = alpha*c00+beta*r0[0], alpha*c01+beta*r0[1], alpha*c02+beta*r0[2], alpha*c03+beta*r0[3]
	r1[0], r1[1], r1[2], r1[3] = alpha*c10+beta*r1[0], alpha*c11+beta*r1[1], alpha*c12+beta*r1[2], alpha*c13+beta*r1[3]
}

// Adam applies one Adam step (Kingma & Ba, 2015) to params in place, with
// lr already divided by 1-β1ᵗ and s = 1/sqrt(1-β2ᵗ):
//
//	m ← β1·m + (1-β1)·g,  v ← β2·v + (1-β2)·g²,  θ ← θ - lr·m / (sqrt(v)·s + ε)
//
// params, m and v are at least len(grad) long. Each operation is rounded
// on its own (no fused multiply-add), in this order, in every
// implementation, so results are bit-identical across CPUs.
func Adam(params, grad, m, v []float64, b1, b2, lr, s, eps float64) {
	n := len(grad)
	params, m, v = params[:n], m[:n], v[:n]
	i := impl.adam(params, grad, m, v, b1, b2, lr, s, eps)
	c1, c2 := 1-b1, 1-b2
	for ; i < n; i++ {
		g := grad[i]
		// float64(…) rounds each product, which keeps the compiler
		// from fusing it into an FMA.
		mi := float64(b1*m[i]) + float64(c1*g)
		vi := float64(b2*v[i]) + float64(c2*float64(g*g))
		m[i], v[i] = mi, vi
		params[i] -= float64(lr*mi) / (float64(math.Sqrt(vi)*s) + eps)
	}
}

// Narrow sets dst[i] = float32(src[i]) for i < len(src); dst is at least
// as long as src.
func Narrow(dst []float32, src []float64) {
	dst = dst[:len(src)]
	for i := impl.narrow(dst, src); i < len(src); i++ {
		dst[i] = float32(src[i])
	}
}

// Add sets dst[i] += src[i] for i < len(src); dst is at least as long
// as src.
func Add(dst, src []float32) {
	dst = dst[:len(src)]
	for i := impl.add(dst, src); i < len(src); i++ {
		dst[i] += src[i]
	}
}

// Widen sets dst[i] = float64(src[i]) for i < len(src); dst is at least
// as long as src.
func Widen(dst []float64, src []float32) {
	dst = dst[:len(src)]
	for i := impl.widen(dst, src); i < len(src); i++ {
		dst[i] = float64(src[i])
	}
}
