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
		name: "avx2",
		s: gemmKernel[float32]{f: packed(gemmAVX2F32, 16), mr: 6, nr: 16, kc: 256, mc: 96,
			rows:     inRows(gemmRowsAVX2F32, 6, 16),
			cols:     inCols(gemmColsAVX2F32, 6, 16),
			rowsEdge: [6]microInPlace[float32]{nil, inRows(gemmRowsAVX2F32x1, 1, 16), inRows(gemmRowsAVX2F32x2, 2, 16), inRows(gemmRowsAVX2F32x3, 3, 16), inRows(gemmRowsAVX2F32x4, 4, 16), inRows(gemmRowsAVX2F32x5, 5, 16)},
			colsEdge: [6]microInPlace[float32]{nil, inCols(gemmColsAVX2F32x1, 1, 16), inCols(gemmColsAVX2F32x2, 2, 16), inCols(gemmColsAVX2F32x3, 3, 16), inCols(gemmColsAVX2F32x4, 4, 16), inCols(gemmColsAVX2F32x5, 5, 16)},
		},
		d: gemmKernel[float64]{f: packed(gemmAVX2F64, 8), mr: 6, nr: 8, kc: 256, mc: 72,
			rows: inRows(gemmRowsAVX2F64, 6, 8),
			cols: inCols(gemmColsAVX2F64, 6, 8),
		},
		adam:   adamAVX2,
		narrow: narrowAVX2,
		widen:  widenAVX2,
		add:    addAVX2,
	}
}()

// packed wraps an assembly kernel that computes one 6×nr tile from a
// packed panel of A in a check that every address it touches lies inside
// its slices.
func packed[T Float](f micro[T], nr int) micro[T] {
	return func(k int, a, b []T, ldb int, c []T, ldc int, alpha, beta T) {
		if k < 0 || len(a) < 6*k || badB(k, len(b), ldb, nr) || badC(len(c), ldc, 6, nr, 1) {
			panic("kernel: micro-kernel out of bounds")
		}
		f(k, a, b, ldb, c, ldc, alpha, beta)
	}
}

// badB reports that k rows of nr values with row stride ldb do not fit in
// lb elements, or overlap.
func badB(k, lb, ldb, nr int) bool { return ldb < nr || k > 0 && lb < (k-1)*ldb+nr }

// inRows wraps an assembly kernel that reads mr rows of A in place per
// tile (nr columns wide), for panels tiles one under the other (rows
// 0…mr·panels-1 of A and C), in a check that every address it touches
// lies inside its slices.
func inRows[T Float](f microInPlace[T], mr, nr int) microInPlace[T] {
	return func(k int, a []T, lda int, b []T, ldb int, c []T, ldc int, alpha, beta T, panels int) {
		if k < 0 || badC(len(c), ldc, mr, nr, panels) || lda < k || len(a) < (mr*panels-1)*lda+k || badB(k, len(b), ldb, nr) {
			panic("kernel: micro-kernel out of bounds")
		}
		f(k, a, lda, b, ldb, c, ldc, alpha, beta, panels)
	}
}

// inCols is inRows for a kernel that reads columns of Aᵀ in place
// (A[r, p] = a[p·lda+r]): k rows of mr·panels values with stride lda.
func inCols[T Float](f microInPlace[T], mr, nr int) microInPlace[T] {
	return func(k int, a []T, lda int, b []T, ldb int, c []T, ldc int, alpha, beta T, panels int) {
		if k < 1 || badC(len(c), ldc, mr, nr, panels) || lda < mr*panels || len(a) < (k-1)*lda+mr*panels || badB(k, len(b), ldb, nr) {
			panic("kernel: micro-kernel out of bounds")
		}
		f(k, a, lda, b, ldb, c, ldc, alpha, beta, panels)
	}
}

// badC reports that mr·panels rows of nr values with row stride ldc do
// not fit in lc elements, or overlap, or that panels < 1.
func badC(lc, ldc, mr, nr, panels int) bool {
	return panels < 1 || ldc < nr || lc < (mr*panels-1)*ldc+nr
}
