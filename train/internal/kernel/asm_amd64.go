//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// asm is the AVX2+FMA implementation (kernel_amd64.s, generated from
// asm/main.go), or nil on CPUs without those extensions. The OS must
// save YMM state, which x/sys/cpu checks (OSXSAVE) before reporting AVX2.
var asm = func() *kernels {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return nil
	}
	return &kernels{
		name:   "avx2",
		s:      gemmKernel[float32]{f: gemmF32, mr: 6, nr: 16, kc: 256, mc: 96},
		d:      gemmKernel[float64]{f: gemmF64, mr: 6, nr: 8, kc: 256, mc: 72},
		adam:   adamAVX2,
		narrow: narrowAVX2,
		widen:  widenAVX2,
	}
}()

// gemmF32 calls the 6×16 assembly micro-kernel after checking that every
// address it touches lies inside its slices.
func gemmF32(k int, a, b, c []float32, ldc int, alpha, beta float32) {
	if k < 0 || len(a) < 6*k || len(b) < 16*k || ldc < 16 || len(c) < 5*ldc+16 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmAVX2F32(k, a, b, c, ldc, alpha, beta)
}

// gemmF64 calls the 6×8 assembly micro-kernel after checking that every
// address it touches lies inside its slices.
func gemmF64(k int, a, b, c []float64, ldc int, alpha, beta float64) {
	if k < 0 || len(a) < 6*k || len(b) < 8*k || ldc < 8 || len(c) < 5*ldc+8 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmAVX2F64(k, a, b, c, ldc, alpha, beta)
}
