package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// TestGemmTiles checks this build's gemm against a naive product for
// every transpose and shapes that do and do not divide into tiles.
func TestGemmTiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][3]int{{3, 4, 5}, {130, 70, 200}, {64, 192, 1}, {200, 9, 400}} {
		m, k, n := s[0], s[1], s[2]
		for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			for _, tB := range []blas.Transpose{blas.NoTrans, blas.Trans} {
				a := blas64.General{Rows: m, Cols: k, Stride: k, Data: make([]float64, m*k)}
				if tA == blas.Trans {
					a = blas64.General{Rows: k, Cols: m, Stride: m, Data: make([]float64, m*k)}
				}
				b := blas64.General{Rows: k, Cols: n, Stride: n, Data: make([]float64, k*n)}
				if tB == blas.Trans {
					b = blas64.General{Rows: n, Cols: k, Stride: k, Data: make([]float64, k*n)}
				}
				c := blas64.General{Rows: m, Cols: n, Stride: n, Data: make([]float64, m*n)}
				for _, d := range [][]float64{a.Data, b.Data, c.Data} {
					for i := range d {
						d[i] = r.NormFloat64()
					}
				}
				want := make([]float64, m*n)
				for i := range m {
					for j := range n {
						sum := 0.0
						for l := range k {
							av, bv := a.Data[i*k+l], b.Data[l*n+j]
							if tA == blas.Trans {
								av = a.Data[l*m+i]
							}
							if tB == blas.Trans {
								bv = b.Data[j*k+l]
							}
							sum += av * bv
						}
						want[i*n+j] = 2*sum + 0.5*c.Data[i*n+j]
					}
				}
				gemm(tA, tB, 2, a, b, 0.5, c)
				for i := range want {
					if math.Abs(c.Data[i]-want[i]) > 1e-9*(1+math.Abs(want[i])) {
						t.Fatalf("%v %v %v: C[%d] = %v, want %v", s, tA, tB, i, c.Data[i], want[i])
					}
				}
			}
		}
	}
}
