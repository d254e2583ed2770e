package kernel

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// benchShapes are the products of one training step of the Fashion-MNIST
// MLP (784-128-64-10, batch 128), largest first: forward x·W₁, backward
// xᵀ·dZ₁, dZ₂·W₂ᵀ, h₁·W₂, and the output layer's h₂·W₃.
var benchShapes = []struct {
	name    string
	tA, tB  blas.Transpose
	m, n, k int
}{
	{"NN/128x128x784", blas.NoTrans, blas.NoTrans, 128, 128, 784},
	{"TN/784x128x128", blas.Trans, blas.NoTrans, 784, 128, 128},
	{"NT/128x128x64", blas.NoTrans, blas.Trans, 128, 128, 64},
	{"NN/128x64x128", blas.NoTrans, blas.NoTrans, 128, 64, 128},
	{"NN/128x10x64", blas.NoTrans, blas.NoTrans, 128, 10, 64},
}

// benchGemm times one shape on one goroutine for each implementation —
// this package's assembly and generic kernels and gonum's pure-Go BLAS —
// and reports GFLOP/s (2·m·n·k per product). Compare with
// benchstat -col /impl.
func benchGemm[T Float](b *testing.B, kn func(*kernels) *gemmKernel[T], ref func(tA, tB blas.Transpose, m, n, k int, a []T, lda int, bm []T, ldb int, c []T, ldc int)) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range benchShapes {
		a, bm, c := make([]T, s.m*s.k), make([]T, s.k*s.n), make([]T, s.m*s.n)
		for _, x := range [][]T{a, bm} {
			for i := range x {
				x[i] = T(r.NormFloat64())
			}
		}
		lda, ldb := s.k, s.n
		if s.tA == blas.Trans {
			lda = s.m
		}
		if s.tB == blas.Trans {
			ldb = s.k
		}
		run := map[string]func(){
			"gonum": func() { ref(s.tA, s.tB, s.m, s.n, s.k, a, lda, bm, ldb, c, s.n) },
		}
		for _, ks := range impls(b) {
			run[ks.name] = func() { gemmParts(kn(ks), 1, s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n) }
		}
		for _, name := range []string{"avx2", "generic", "gonum"} {
			f, ok := run[name]
			if !ok {
				continue
			}
			b.Run(fmt.Sprintf("%s/impl=%s", s.name, name), func(b *testing.B) {
				f()
				b.ReportAllocs()
				for b.Loop() {
					f()
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func BenchmarkSgemm(b *testing.B) {
	benchGemm(b, func(ks *kernels) *gemmKernel[float32] { return &ks.s },
		func(tA, tB blas.Transpose, m, n, k int, a []float32, lda int, bm []float32, ldb int, c []float32, ldc int) {
			gonum.Implementation{}.Sgemm(tA, tB, m, n, k, 1, a, lda, bm, ldb, 0, c, ldc)
		})
}

func BenchmarkDgemm(b *testing.B) {
	benchGemm(b, func(ks *kernels) *gemmKernel[float64] { return &ks.d },
		func(tA, tB blas.Transpose, m, n, k int, a []float64, lda int, bm []float64, ldb int, c []float64, ldc int) {
			gonum.Implementation{}.Dgemm(tA, tB, m, n, k, 1, a, lda, bm, ldb, 0, c, ldc)
		})
}

// BenchmarkParallel times Sgemm on the MLP's shapes split into 1 and
// GOMAXPROCS parts (run with GOMAXPROCS=2 in the environment to see the
// pool's gain, not -cpu 1,2, which does not reach sub-benchmarks; parts=1
// is the serial baseline).
func BenchmarkParallel(b *testing.B) {
	for _, s := range benchShapes {
		a, bm, c := make([]float32, s.m*s.k), make([]float32, s.k*s.n), make([]float32, s.m*s.n)
		lda, ldb := s.k, s.n
		if s.tA == blas.Trans {
			lda = s.m
		}
		if s.tB == blas.Trans {
			ldb = s.k
		}
		for _, parts := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/parts=%d", s.name, parts), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					gemmParts(&impl.s, parts, s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkAdam times the Adam update of the MLP's 109,386 parameters.
func BenchmarkAdam(b *testing.B) {
	const n = 109386
	p, g, m, v := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range g {
		g[i] = float64(i%13) - 6
	}
	for _, ks := range impls(b) {
		b.Run("impl="+ks.name, func(b *testing.B) {
			old := impl
			impl = ks
			defer func() { impl = old }()
			for b.Loop() {
				Adam(p, g, m, v, 0.9, 0.999, 1e-3, 1, 1e-8)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mparams/s")
		})
	}
}
