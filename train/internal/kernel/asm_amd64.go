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

// gemmRowsF32 calls the 6×16 assembly kernel that reads rows of A in
// place, for panels tiles one under the other (rows 0…6·panels-1 of A and
// C), after checking that every address it touches lies inside its slices.
func gemmRowsF32(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, panels int) {
	if badRows(k, len(a), lda, len(b), ldb, 16, len(c), ldc, panels) {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmRowsAVX2F32(k, a, lda, b, ldb, c, ldc, alpha, beta, panels)
}

// gemmRowsF64 is gemmRowsF32's 6×8 float64 kernel.
func gemmRowsF64(k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int, alpha, beta float64, panels int) {
	if badRows(k, len(a), lda, len(b), ldb, 8, len(c), ldc, panels) {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmRowsAVX2F64(k, a, lda, b, ldb, c, ldc, alpha, beta, panels)
}

// gemmColsF32 calls the 6×16 assembly kernel that reads columns of Aᵀ in
// place (A[r, p] = a[p·lda+r]), for panels tiles one under the other
// (columns 0…6·panels-1 of Aᵀ, rows of C), after checking that every
// address it touches lies inside its slices.
func gemmColsF32(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, panels int) {
	if badCols(k, len(a), lda, len(b), ldb, 16, len(c), ldc, panels) {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmColsAVX2F32(k, a, lda, b, ldb, c, ldc, alpha, beta, panels)
}

// gemmColsF64 is gemmColsF32's 6×8 float64 kernel.
func gemmColsF64(k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int, alpha, beta float64, panels int) {
	if badCols(k, len(a), lda, len(b), ldb, 8, len(c), ldc, panels) {
		panic("kernel: micro-kernel out of bounds")
	}
	gemmColsAVX2F64(k, a, lda, b, ldb, c, ldc, alpha, beta, panels)
}

// badC reports that 6·panels rows of nr values with row stride ldc do not
// fit in lc elements, or overlap, or that panels < 1.
func badC(lc, ldc, nr, panels int) bool {
	return panels < 1 || ldc < nr || lc < (6*panels-1)*ldc+nr
}

// badRows reports that the in-place rows kernel's operands are out of
// bounds: 6·panels rows of k values of A with stride lda, k rows of B, C.
func badRows(k, la, lda, lb, ldb, nr, lc, ldc, panels int) bool {
	return k < 0 || badC(lc, ldc, nr, panels) || lda < k || la < (6*panels-1)*lda+k || badB(k, lb, ldb, nr)
}

// badCols reports that the in-place columns kernel's operands are out of
// bounds: k rows of 6·panels values of Aᵀ with stride lda, k rows of B, C.
func badCols(k, la, lda, lb, ldb, nr, lc, ldc, panels int) bool {
	return k < 1 || badC(lc, ldc, nr, panels) || lda < 6*panels || la < (k-1)*lda+6*panels || badB(k, lb, ldb, nr)
}
