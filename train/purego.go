//go:build !(cgo && openblas)

package train

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
)

// BLAS names the blas64 backend this build uses: gonum's pure Go one,
// unless built with -tags openblas (see openblas.go).
const BLAS = "gonum"

func adamStep(params, grad, m, v []float64, b1, b2, lr, s, eps float64) {
	adamStepGo(params, grad, m, v, b1, b2, lr, s, eps)
}

// gemm is blas64.Gemm, C = alpha·op(A)·op(B) + beta·C, done in tiles of C
// of at most tileRows×tileCols. gonum multiplies a product that spans 4 or
// more 64×64 blocks of C on one goroutine per block, allocating on every
// call; its tiles stay below that, so training steps allocate nothing. A
// trainer is one goroutine either way.
func gemm(tA, tB blas.Transpose, alpha float64, a, b blas64.General, beta float64, c blas64.General) {
	tile(tA, tB, a.Rows, a.Stride, b.Rows, b.Stride, c.Rows, c.Cols, c.Stride, func(ao, ar, ac, bo, br, bc, co, cr, cc int) {
		blas64.Gemm(tA, tB, alpha, blas64.General{Rows: ar, Cols: ac, Stride: a.Stride, Data: a.Data[ao:]},
			blas64.General{Rows: br, Cols: bc, Stride: b.Stride, Data: b.Data[bo:]}, beta,
			blas64.General{Rows: cr, Cols: cc, Stride: c.Stride, Data: c.Data[co:]})
	}, a.Cols, b.Cols)
}

// gemm32 is gemm for float32, through blas32.Gemm.
func gemm32(tA, tB blas.Transpose, alpha float32, a, b blas32.General, beta float32, c blas32.General) {
	tile(tA, tB, a.Rows, a.Stride, b.Rows, b.Stride, c.Rows, c.Cols, c.Stride, func(ao, ar, ac, bo, br, bc, co, cr, cc int) {
		blas32.Gemm(tA, tB, alpha, blas32.General{Rows: ar, Cols: ac, Stride: a.Stride, Data: a.Data[ao:]},
			blas32.General{Rows: br, Cols: bc, Stride: b.Stride, Data: b.Data[bo:]}, beta,
			blas32.General{Rows: cr, Cols: cc, Stride: c.Stride, Data: c.Data[co:]})
	}, a.Cols, b.Cols)
}

// tile calls f with the offsets and shapes of A, B and C for each tile of
// C; A is aRows×aCols (before op) with stride as, and so on.
func tile(tA, tB blas.Transpose, aRows, as, bRows, bs, cRows, cCols, cs int,
	f func(ao, ar, ac, bo, br, bc, co, cr, cc int), aCols, bCols int) {
	const tileRows, tileCols = 64, 192
	for i := 0; i < cRows; i += tileRows {
		h := min(tileRows, cRows-i)
		ao, ar, ac := i*as, h, aCols
		if tA != blas.NoTrans {
			ao, ar, ac = i, aRows, h
		}
		for j := 0; j < cCols; j += tileCols {
			w := min(tileCols, cCols-j)
			bo, br, bc := j, bRows, w
			if tB != blas.NoTrans {
				bo, br, bc = j*bs, w, bCols
			}
			f(ao, ar, ac, bo, br, bc, i*cs+j, h, w)
		}
	}
}
