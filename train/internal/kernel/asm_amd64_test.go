//go:build !purego

package kernel

import (
	"fmt"
	"testing"
)

// TestInPlaceKernels runs the in-place kernels, the six-row ones and the
// float32 ones for a last panel of one to five rows, over several tiles of
// C in one call (panels > 1) on operands of exactly the size they need, against
// a plain triple loop, and checks that each operand one element shorter,
// or panels < 1, panics instead of reading or writing past its slice.
func TestInPlaceKernels(t *testing.T) {
	if asm == nil {
		t.Skip("no AVX2+FMA on this CPU: the in-place kernels do not run here")
	}
	testInPlace(t, "rows/f32", 6, 16, false, asm.s.rows)
	testInPlace(t, "cols/f32", 6, 16, true, asm.s.cols)
	testInPlace(t, "rows/f64", 6, 8, false, asm.d.rows)
	testInPlace(t, "cols/f64", 6, 8, true, asm.d.cols)
	for mr := 1; mr < 6; mr++ {
		testInPlace(t, fmt.Sprintf("rows%d/f32", mr), mr, 16, false, asm.s.rowsEdge[mr])
		testInPlace(t, fmt.Sprintf("cols%d/f32", mr), mr, 16, true, asm.s.colsEdge[mr])
	}
}

func testInPlace[T Float](t *testing.T, name string, mr, nr int, ta bool, f microInPlace[T]) {
	const panels, k, pad = 3, 5, 3
	m := mr * panels
	lda, ldb, ldc := k+pad, nr+pad, nr+pad
	la := (m-1)*lda + k // A m×k
	if ta {
		lda = m + pad
		la = (k-1)*lda + m // Aᵀ k×m
	}
	lb, lc := (k-1)*ldb+nr, (m-1)*ldc+nr
	at := func(a []T, r, p int) T {
		if ta {
			return a[p*lda+r]
		}
		return a[r*lda+p]
	}
	a, b, c := make([]T, la), make([]T, lb), make([]T, lc)
	for i := range a {
		a[i] = T(i%7) - 3
	}
	for i := range b {
		b[i] = T(i%5) - 2
	}
	for i := range c {
		c[i] = T(i % 3)
	}
	want := make([]T, lc)
	copy(want, c)
	for r := range m {
		for j := range nr {
			var s T
			for p := range k {
				s += at(a, r, p) * b[p*ldb+j]
			}
			want[r*ldc+j] = 2*s + 0.5*c[r*ldc+j]
		}
	}
	t.Run(name, func(t *testing.T) {
		f(k, a, lda, b, ldb, c, ldc, 2, 0.5, panels)
		for i := range want {
			if c[i] != want[i] {
				t.Fatalf("C[%d] = %v, want %v", i, c[i], want[i])
			}
		}
		for _, tc := range []struct {
			what    string
			a, b, c []T
			panels  int
		}{
			{"short a", a[:la-1], b, c, panels},
			{"short b", a, b[:lb-1], c, panels},
			{"short c", a, b, c[:lc-1], panels},
			{"one panel too many", a, b, c, panels + 1},
			{"no panel", a, b, c, 0},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: no panic", tc.what)
					}
				}()
				f(k, tc.a, lda, tc.b, ldb, tc.c, ldc, 2, 0.5, tc.panels)
			}()
		}
	})
}
