package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/trainflow/trainflow/internal/testenv/race"
)

// impls are the implementations this CPU can run: the generic one always,
// the assembly where the CPU has AVX2 and FMA.
func impls(t testing.TB) []*kernels {
	ks := []*kernels{&generic}
	if asm != nil {
		ks = append(ks, asm)
	} else {
		t.Logf("no assembly kernels on this CPU or build: testing the generic ones only")
	}
	return ks
}

// gemmCase is one product: op(A) m×k, op(B) k×n, C m×n, with padded
// strides when pad is set.
type gemmCase struct {
	tA, tB      blas.Transpose
	m, n, k     int
	alpha, beta float64
	pad         bool
}

func (c gemmCase) String() string {
	return fmt.Sprintf("%s%s/%dx%dx%d/alpha=%g/beta=%g/pad=%v", trans(c.tA), trans(c.tB), c.m, c.n, c.k, c.alpha, c.beta, c.pad)
}

func trans(t blas.Transpose) string {
	if t == blas.NoTrans {
		return "N"
	}
	return "T"
}

// operands returns random A, B and C for c with their strides; C holds
// NaNs when beta is 0, which a correct GEMM never reads.
func (c gemmCase) operands(r *rand.Rand) (a []float64, lda int, b []float64, ldb int, cm []float64, ldc int) {
	ar, ac := c.m, c.k
	if c.tA != blas.NoTrans {
		ar, ac = c.k, c.m
	}
	br, bc := c.k, c.n
	if c.tB != blas.NoTrans {
		br, bc = c.n, c.k
	}
	lda, ldb, ldc = max(ac, 1), max(bc, 1), max(c.n, 1)
	if c.pad {
		lda, ldb, ldc = lda+3, ldb+1, ldc+5
	}
	fill := func(rows, cols, ld int) []float64 {
		if rows == 0 {
			return nil
		}
		d := make([]float64, (rows-1)*ld+cols)
		for i := range d {
			d[i] = r.NormFloat64()
		}
		return d
	}
	a, b, cm = fill(ar, ac, lda), fill(br, bc, ldb), fill(c.m, c.n, ldc)
	if c.beta == 0 {
		for i := range cm {
			cm[i] = math.NaN()
		}
	}
	return a, lda, b, ldb, cm, ldc
}

// check runs case c through kernels ks split into parts, in float32 and
// float64, and compares every element of C with gonum's reference BLAS:
// |got - want| ≤ tol·(|alpha|·Σₚ|A[i,p]·B[p,j]| + |beta·C[i,j]|), that is
// tol relative to the size of the terms summed (1e-5 for float32, 1e-12
// for float64).
func check(t *testing.T, ks *kernels, parts int, c gemmCase, r *rand.Rand) {
	t.Helper()
	a, lda, b, ldb, c0, ldc := c.operands(r)
	// bound[i·n+j] = Σₚ |A[i,p]·B[p,j]|, with the same reference GEMM on
	// absolute values.
	abs := func(x []float64) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = math.Abs(v)
		}
		return y
	}
	bound := make([]float64, c.m*c.n)
	if c.m > 0 && c.n > 0 {
		gonum.Implementation{}.Dgemm(c.tA, c.tB, c.m, c.n, c.k, 1, abs(a), lda, abs(b), ldb, 0, bound, max(c.n, 1))
	}
	within := func(prec string, tol float64, got, want, cOld []float64) {
		t.Helper()
		for i := range c.m {
			for j := range c.n {
				g, w := got[i*ldc+j], want[i*ldc+j]
				old := 0.0
				if c.beta != 0 {
					old = math.Abs(c.beta * cOld[i*ldc+j])
				}
				lim := tol * (math.Abs(c.alpha)*bound[i*c.n+j] + old + 1e-30)
				if !(math.Abs(g-w) <= lim) {
					t.Fatalf("%s %s parts=%d %v: C[%d,%d] = %v, want %v (±%.3g)", ks.name, prec, parts, c, i, j, g, w, lim)
				}
			}
		}
		for i := range got { // padding between rows is left alone
			if j := i % ldc; j >= c.n && !(got[i] == cOld[i] || math.IsNaN(got[i]) && math.IsNaN(cOld[i])) {
				t.Fatalf("%s %s %v: padding C[%d] changed to %v", ks.name, prec, c, i, got[i])
			}
		}
	}

	got, want := append([]float64(nil), c0...), append([]float64(nil), c0...)
	gemmParts(&ks.d, parts, c.tA, c.tB, c.m, c.n, c.k, c.alpha, a, lda, b, ldb, c.beta, got, ldc)
	gonum.Implementation{}.Dgemm(c.tA, c.tB, c.m, c.n, c.k, c.alpha, a, lda, b, ldb, c.beta, want, ldc)
	within("float64", 1e-12, got, want, c0)

	a32, b32, c32, w32 := to32(a), to32(b), to32(c0), to32(c0)
	gemmParts(&ks.s, parts, c.tA, c.tB, c.m, c.n, c.k, float32(c.alpha), a32, lda, b32, ldb, float32(c.beta), c32, ldc)
	gonum.Implementation{}.Sgemm(c.tA, c.tB, c.m, c.n, c.k, float32(c.alpha), a32, lda, b32, ldb, float32(c.beta), w32, ldc)
	within("float32", 1e-5, to64(c32), to64(w32), to64(to32(c0)))
}

func to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

var transposes = []blas.Transpose{blas.NoTrans, blas.Trans}

// TestGemmEdges compares every implementation with gonum's reference BLAS
// on sizes around the tiles (1, odd, one past a tile, more than a k
// block), every transpose, padded strides, alpha and beta of every kind,
// serially and split into 2 and 3 parts.
func TestGemmEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 2, 5, 6, 7, 16, 17, 31}
	for _, ks := range impls(t) {
		for _, tA := range transposes {
			for _, tB := range transposes {
				for _, m := range sizes {
					for _, n := range sizes {
						k := sizes[r.IntN(len(sizes))]
						ab := [][2]float64{{1, 0}, {1, 1}, {-0.5, 0.25}, {2, 0}}[r.IntN(4)]
						check(t, ks, 1+r.IntN(3), gemmCase{tA: tA, tB: tB, m: m, n: n, k: k, alpha: ab[0], beta: ab[1], pad: r.IntN(2) == 0}, r)
					}
				}
			}
		}
	}
}

// TestGemmShapes covers the shapes of the MLP's training step (batch 128,
// 784-128-64-10: forward x·W, backward xᵀ·dZ and dZ·Wᵀ), blocks larger
// than kc and mc, a B read in place and one too wide for it, degenerate
// sizes and alpha 0, serially and in parts.
func TestGemmShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := []gemmCase{
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 128, n: 128, k: 784, alpha: 1, beta: 1},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 128, n: 10, k: 64, alpha: 1, beta: 1},
		{tA: blas.Trans, tB: blas.NoTrans, m: 784, n: 128, k: 128, alpha: 1},
		{tA: blas.Trans, tB: blas.NoTrans, m: 64, n: 10, k: 128, alpha: 1},
		{tA: blas.NoTrans, tB: blas.Trans, m: 128, n: 128, k: 64, alpha: 1},
		{tA: blas.NoTrans, tB: blas.Trans, m: 128, n: 64, k: 10, alpha: 1},
		{tA: blas.Trans, tB: blas.Trans, m: 97, n: 203, k: 300, alpha: -1.5, beta: 0.5, pad: true},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 301, n: 37, k: 517, alpha: 0.5, beta: -1, pad: true},
		// a k block of B spans more than maxDirectBSpan: B is packed
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 13, n: 600, k: 300, alpha: 1, beta: 0.5},
		{tA: blas.Trans, tB: blas.NoTrans, m: 13, n: 600, k: 300, alpha: 1},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 0, n: 5, k: 3, alpha: 1},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 5, n: 0, k: 3, alpha: 1},
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 5, n: 7, k: 0, alpha: 1, beta: 0.5},
		{tA: blas.NoTrans, tB: blas.Trans, m: 5, n: 7, k: 0, alpha: 1},
		{tA: blas.Trans, tB: blas.NoTrans, m: 9, n: 9, k: 9, alpha: 0, beta: 2},
		{tA: blas.Trans, tB: blas.NoTrans, m: 9, n: 9, k: 9, alpha: 0},
	}
	for _, ks := range impls(t) {
		for _, c := range cases {
			for _, parts := range []int{1, 2, 3} {
				check(t, ks, parts, c, r)
			}
		}
	}
}

// TestGemmRandom compares on random shapes up to 150 on each side.
func TestGemmRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 60 {
		c := gemmCase{tA: transposes[r.IntN(2)], tB: transposes[r.IntN(2)], m: 1 + r.IntN(150), n: 1 + r.IntN(150),
			k: 1 + r.IntN(150), alpha: r.NormFloat64(), beta: []float64{0, 1, r.NormFloat64()}[r.IntN(3)], pad: r.IntN(2) == 0}
		for _, ks := range impls(t) {
			check(t, ks, 1+r.IntN(3), c, r)
		}
	}
}

// TestGemmPublic checks that Sgemm and Dgemm, which split large products
// across the pool by themselves, agree with the reference.
func TestGemmPublic(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []gemmCase{
		{tA: blas.NoTrans, tB: blas.NoTrans, m: 256, n: 200, k: 300, alpha: 1, beta: 0},
		{tA: blas.Trans, tB: blas.Trans, m: 40, n: 500, k: 129, alpha: 1, beta: 1},
	} {
		a, lda, b, ldb, c0, ldc := c.operands(r)
		got, want := append([]float64(nil), c0...), append([]float64(nil), c0...)
		Dgemm(c.tA, c.tB, c.m, c.n, c.k, c.alpha, a, lda, b, ldb, c.beta, got, ldc)
		gonum.Implementation{}.Dgemm(c.tA, c.tB, c.m, c.n, c.k, c.alpha, a, lda, b, ldb, c.beta, want, ldc)
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-10*(1+math.Abs(want[i])) {
				t.Fatalf("Dgemm %v: C[%d] = %v, want %v", c, i, got[i], want[i])
			}
		}
		g32, w32 := to32(c0), to32(c0)
		Sgemm(c.tA, c.tB, c.m, c.n, c.k, float32(c.alpha), to32(a), lda, to32(b), ldb, float32(c.beta), g32, ldc)
		gonum.Implementation{}.Sgemm(c.tA, c.tB, c.m, c.n, c.k, float32(c.alpha), to32(a), lda, to32(b), ldb, float32(c.beta), w32, ldc)
		for i := range g32 {
			if math.Abs(float64(g32[i]-w32[i])) > 1e-4*(1+math.Abs(float64(w32[i]))) {
				t.Fatalf("Sgemm %v: C[%d] = %v, want %v", c, i, g32[i], w32[i])
			}
		}
	}
}

// TestGemmPanics checks the BLAS contract on bad arguments: a panic, never
// a read or write outside the slices.
func TestGemmPanics(t *testing.T) {
	a, b, c := make([]float32, 12), make([]float32, 12), make([]float32, 16)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"short a", func() { Sgemm(blas.NoTrans, blas.NoTrans, 4, 4, 4, 1, a, 4, b[:12], 4, 0, c, 4) }},
		{"short c", func() { Sgemm(blas.NoTrans, blas.NoTrans, 4, 3, 3, 1, a, 3, b, 3, 0, c[:11], 3) }},
		{"small lda", func() { Sgemm(blas.NoTrans, blas.NoTrans, 2, 2, 3, 1, a, 2, b, 2, 0, c, 2) }},
		{"negative", func() { Sgemm(blas.NoTrans, blas.NoTrans, -1, 2, 3, 1, a, 3, b, 2, 0, c, 2) }},
		{"bad transpose", func() { Sgemm('x', blas.NoTrans, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.f()
		})
	}
}

// TestGemmAllocs checks that warm products, serial and split, allocate
// nothing.
func TestGemmAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector makes sync.Pool drop scratch at random, so products allocate")
	}
	a, b, c := make([]float32, 128*784), make([]float32, 784*128), make([]float32, 128*128)
	for _, parts := range []int{1, 2} {
		run := func() {
			gemmParts(&impl.s, parts, blas.NoTrans, blas.NoTrans, 128, 128, 784, 1, a, 784, b, 128, 0, c, 128)
		}
		run()
		if n := testing.AllocsPerRun(20, run); n != 0 {
			t.Errorf("parts=%d: %v allocations per product, want 0", parts, n)
		}
	}
}

// FuzzGemm compares every implementation with the reference on fuzzed
// shapes, transposes, strides, scalars and split counts.
func FuzzGemm(f *testing.F) {
	f.Add(uint8(7), uint8(17), uint8(5), uint8(0), uint64(1))
	f.Add(uint8(1), uint8(1), uint8(1), uint8(0xff), uint64(2))
	f.Add(uint8(130), uint8(33), uint8(255), uint8(0x15), uint64(3))
	f.Fuzz(func(t *testing.T, m, n, k, flags uint8, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 9))
		c := gemmCase{m: int(m), n: int(n), k: int(k), tA: transposes[flags&1], tB: transposes[flags>>1&1],
			pad: flags&4 != 0, alpha: []float64{1, -0.5}[flags>>3&1], beta: []float64{0, 1, 0.5, -2}[flags>>4&3]}
		for _, ks := range impls(t) {
			check(t, ks, 1+int(flags>>6), c, r)
		}
	})
}

// TestGemmSerialMatchesSplit checks that SgemmSerial and DgemmSerial, and
// SgemmSerialIn and DgemmSerialIn on one caller's Scratch reused from
// product to product, give Sgemm's and Dgemm's results bit for bit on
// products large enough to be split across the pool (with beta 0 and 1,
// each transpose): a split of C must not change how an element is
// summed, which the batch split of train.Sequential and train.Net relies
// on for logits independent of the split.
func TestGemmSerialMatchesSplit(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	r := rand.New(rand.NewPCG(5, 5))
	m, n, k := 301, 203, 67 // 4.1M multiply-adds: above parallelMin, ragged tiles
	if parallelism(m, n, k) < 2 && runtime.NumCPU() >= 2 {
		t.Fatalf("parallelism(%d, %d, %d) = 1: the product would not split", m, n, k)
	}
	fill := func(n int) ([]float32, []float64) {
		s, d := make([]float32, n), make([]float64, n)
		for i := range s {
			d[i] = r.NormFloat64()
			s[i] = float32(d[i])
		}
		return s, d
	}
	a32, a64 := fill(m * k)
	b32, b64 := fill(k * n)
	c32, c64 := fill(m * n)
	var sc32 Scratch[float32]
	var sc64 Scratch[float64]
	for _, tA := range []blas.Transpose{blas.NoTrans, blas.Trans} {
		for _, tB := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			for _, beta := range []float64{0, 1} {
				lda, ldb := k, n
				if tA == blas.Trans {
					lda = m
				}
				if tB == blas.Trans {
					ldb = k
				}
				s1, s2 := slices.Clone(c32), slices.Clone(c32)
				Sgemm(tA, tB, m, n, k, 1, a32, lda, b32, ldb, float32(beta), s1, n)
				SgemmSerial(tA, tB, m, n, k, 1, a32, lda, b32, ldb, float32(beta), s2, n)
				d1, d2 := slices.Clone(c64), slices.Clone(c64)
				Dgemm(tA, tB, m, n, k, 1, a64, lda, b64, ldb, beta, d1, n)
				DgemmSerial(tA, tB, m, n, k, 1, a64, lda, b64, ldb, beta, d2, n)
				if !slices.Equal(s1, s2) || !slices.Equal(d1, d2) {
					t.Errorf("tA %v tB %v beta %v: serial and split products differ", tA, tB, beta)
				}
				s3, d3 := slices.Clone(c32), slices.Clone(c64)
				SgemmSerialIn(&sc32, tA, tB, m, n, k, 1, a32, lda, b32, ldb, float32(beta), s3, n)
				DgemmSerialIn(&sc64, tA, tB, m, n, k, 1, a64, lda, b64, ldb, beta, d3, n)
				if !slices.Equal(s1, s3) || !slices.Equal(d1, d3) {
					t.Errorf("tA %v tB %v beta %v: products in a caller's Scratch and split products differ", tA, tB, beta)
				}
			}
		}
	}
}
