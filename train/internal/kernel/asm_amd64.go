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
		s:      gemmKernel[float32]{f: gemmF32, rows: gemmRowsF32, cols: gemmColsF32, mr: 6, nr: 16, kc: 256, mc: 96},
		d:      gemmKernel[float64]{f: gemmF64, rows: gemmRowsF64, cols: gemmColsF64, mr: 6, nr: 8, kc: 256, mc: 72},
		adam:   adamAVX2,
		narrow: narrowAVX2,
		widen:  widenAVX2,
		add:    addAVX2,
	}
}()

// gemmF32 calls the 6×16 assembly micro-kernel after checking that every
// address it touches lies inside its slices.
func gemmF32(k int, a, b []float32, ldb int, c []float32, ldc int, alpha, beta float32) {
	if k < 0 || len(a) < 6*k || badB(k, len(b), ldb, 16) || ldc < 16 || len(c) < 5*ldc+16 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmAVX2F32(k, a, b, ldb, c, ldc, alpha, beta)
}

// gemmF64 calls the 6×8 assembly micro-kernel after checking that every
// address it touches lies inside its slices.
func gemmF64(k int, a, b []float64, ldb int, c []float64, ldc int, alpha, beta float64) {
	if k < 0 || len(a) < 6*k || badB(k, len(b), ldb, 8) || ldc < 8 || len(c) < 5*ldc+8 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmAVX2F64(k, a, b, ldb, c, ldc, alpha, beta)
}

// badB reports that k rows of nr values with row stride ldb do not fit in
// lb elements, or overlap.
func badB(k, lb, ldb, nr int) bool { return ldb < nr || k > 0 && lb < (k-1)*ldb+nr }

// gemmRowsF32 calls the 6×16 assembly micro-kernel that reads six rows of
// A in place after checking that every address it touches lies inside its
// slices.
func gemmRowsF32(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32) {
	if k < 0 || lda < k || len(a) < 5*lda+k || badB(k, len(b), ldb, 16) || ldc < 16 || len(c) < 5*ldc+16 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmRowsAVX2F32(k, a, lda, b, ldb, c, ldc, alpha, beta)
}

// gemmRowsF64 is gemmRowsF32's 6×8 float64 kernel.
func gemmRowsF64(k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int, alpha, beta float64) {
	if k < 0 || lda < k || len(a) < 5*lda+k || badB(k, len(b), ldb, 8) || ldc < 8 || len(c) < 5*ldc+8 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmRowsAVX2F64(k, a, lda, b, ldb, c, ldc, alpha, beta)
}

// gemmColsF32 calls the 6×16 assembly micro-kernel that reads six
// columns of Aᵀ in place (A[r, p] = a[p·lda+r]) after checking that every
// address it touches lies inside its slices.
func gemmColsF32(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32) {
	if k < 1 || lda < 6 || len(a) < (k-1)*lda+6 || badB(k, len(b), ldb, 16) || ldc < 16 || len(c) < 5*ldc+16 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmColsAVX2F32(k, a, lda, b, ldb, c, ldc, alpha, beta)
}

// gemmColsF64 is gemmColsF32's 6×8 float64 kernel.
func gemmColsF64(k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int, alpha, beta float64) {
	if k < 1 || lda < 6 || len(a) < (k-1)*lda+6 || badB(k, len(b), ldb, 8) || ldc < 8 || len(c) < 5*ldc+8 {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmColsAVX2F64(k, a, lda, b, ldb, c, ldc, alpha, beta)
}
