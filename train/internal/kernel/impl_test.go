package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// withImpl runs f with impl set to ks.
func withImpl(t *testing.T, ks *kernels, f func()) {
	t.Helper()
	old := impl
	impl = ks
	defer func() { impl = old }()
	f()
}

// TestAdamBitIdentical checks Adam against the formula written out in
// plain Go, bit for bit, in every implementation and for lengths around
// the vector width.
func TestAdamBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	b1, b2, lr, s, eps := 0.9, 0.999, 1e-3, 1.7, 1e-8 // variables: float64 arithmetic, as in the optimizer
	for _, ks := range impls(t) {
		for _, n := range []int{0, 1, 3, 4, 5, 8, 37, 1000} {
			p, g, m, v := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
			for i := range n {
				p[i], g[i], m[i], v[i] = r.NormFloat64(), r.NormFloat64()*1e-2, r.NormFloat64()*1e-3, r.Float64()*1e-4
			}
			wp, wm, wv := append([]float64(nil), p...), append([]float64(nil), m...), append([]float64(nil), v...)
			for i, gi := range g {
				mi := float64(b1*wm[i]) + float64((1-b1)*gi)
				vi := float64(b2*wv[i]) + float64((1-b2)*float64(gi*gi))
				wm[i], wv[i] = mi, vi
				wp[i] -= float64(lr*mi) / (float64(math.Sqrt(vi)*s) + eps)
			}
			withImpl(t, ks, func() { Adam(p, g, m, v, b1, b2, lr, s, eps) })
			for i := range n {
				if p[i] != wp[i] || m[i] != wm[i] || v[i] != wv[i] {
					t.Fatalf("%s n=%d: element %d: θ, m, v = %v, %v, %v, want %v, %v, %v", ks.name, n, i, p[i], m[i], v[i], wp[i], wm[i], wv[i])
				}
			}
		}
	}
}

// TestNarrowWiden checks the conversions against Go's, including
// rounding, overflow to ±Inf and NaN, for lengths around the vector width.
func TestNarrowWiden(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, ks := range impls(t) {
		for _, n := range []int{0, 1, 7, 8, 9, 16, 100} {
			src := make([]float64, n)
			for i := range src {
				src[i] = r.NormFloat64() * math.Pow(10, float64(r.IntN(90)-45))
			}
			if n > 3 {
				src[0], src[1], src[2] = math.NaN(), 1e300, -1e300
			}
			dst := make([]float32, n+1)
			dst[n] = 42
			back := make([]float64, n)
			withImpl(t, ks, func() {
				Narrow(dst, src)
				Widen(back, dst[:n])
			})
			if dst[n] != 42 {
				t.Fatalf("%s n=%d: Narrow wrote past len(src)", ks.name, n)
			}
			for i, v := range src {
				want := float32(v)
				if dst[i] != want && !(math.IsNaN(float64(want)) && math.IsNaN(float64(dst[i]))) {
					t.Fatalf("%s n=%d: Narrow[%d] = %v, want %v", ks.name, n, i, dst[i], want)
				}
				if w := float64(dst[i]); back[i] != w && !(math.IsNaN(w) && math.IsNaN(back[i])) {
					t.Fatalf("%s n=%d: Widen[%d] = %v, want %v", ks.name, n, i, back[i], w)
				}
			}
		}
	}
}

// TestAdd checks dst += src against Go's addition, including ±Inf, NaN
// and rounding, for lengths around the vector width, and that it writes
// nothing past len(src).
func TestAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, ks := range impls(t) {
		for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 100} {
			dst, src := make([]float32, n+1), make([]float32, n)
			for i := range src {
				dst[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(20)-10)))
				src[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(20)-10)))
			}
			if n > 3 {
				dst[0], src[1], dst[2], src[2] = float32(math.NaN()), float32(math.Inf(1)), math.MaxFloat32, math.MaxFloat32
			}
			dst[n] = 42
			want := make([]float32, n)
			for i := range want {
				want[i] = dst[i] + src[i]
			}
			withImpl(t, ks, func() { Add(dst, src) })
			if dst[n] != 42 {
				t.Fatalf("%s n=%d: Add wrote past len(src)", ks.name, n)
			}
			for i, w := range want {
				if dst[i] != w && !(w != w && dst[i] != dst[i]) {
					t.Fatalf("%s n=%d: element %d = %v, want %v", ks.name, n, i, dst[i], w)
				}
			}
		}
	}
}

// TestChoose checks that TRAINFLOW_KERNELS=generic forces the portable
// kernels and that otherwise the CPU decides.
func TestChoose(t *testing.T) {
	if got := choose("generic"); got != &generic {
		t.Errorf("choose(generic) = %s, want generic", got.name)
	}
	want := "generic"
	if asm != nil {
		want = "avx2"
	}
	for _, env := range []string{"", "auto", "avx2"} {
		if got := choose(env); got.name != want {
			t.Errorf("choose(%q) = %s, want %s", env, got.name, want)
		}
	}
}
