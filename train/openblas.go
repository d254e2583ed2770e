//go:build cgo && openblas

package train

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -lopenblas -lm
#include <cblas.h>
#include <immintrin.h>
#include <math.h>

// adam_step is adamStepGo in C: the same IEEE operations in the same order
// and no FMA, so both give bit-identical results. Where the CPU has AVX it
// runs four parameters per instruction.
__attribute__((target("avx")))
static long adam_step_avx(double *p, const double *g, double *m, double *v,
		long n, double b1, double b2, double lr, double s, double eps) {
	__m256d B1 = _mm256_set1_pd(b1), C1 = _mm256_set1_pd(1 - b1), B2 = _mm256_set1_pd(b2),
		C2 = _mm256_set1_pd(1 - b2), LR = _mm256_set1_pd(lr), S = _mm256_set1_pd(s), EPS = _mm256_set1_pd(eps);
	long i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d gi = _mm256_loadu_pd(g + i);
		__m256d mi = _mm256_add_pd(_mm256_mul_pd(B1, _mm256_loadu_pd(m + i)), _mm256_mul_pd(C1, gi));
		__m256d vi = _mm256_add_pd(_mm256_mul_pd(B2, _mm256_loadu_pd(v + i)), _mm256_mul_pd(C2, _mm256_mul_pd(gi, gi)));
		_mm256_storeu_pd(m + i, mi);
		_mm256_storeu_pd(v + i, vi);
		__m256d d = _mm256_add_pd(_mm256_mul_pd(_mm256_sqrt_pd(vi), S), EPS);
		_mm256_storeu_pd(p + i, _mm256_sub_pd(_mm256_loadu_pd(p + i), _mm256_div_pd(_mm256_mul_pd(LR, mi), d)));
	}
	return i;
}

static void adam_step(double *p, const double *g, double *m, double *v,
		long n, double b1, double b2, double lr, double s, double eps) {
	long i = 0;
	if (__builtin_cpu_supports("avx")) {
		i = adam_step_avx(p, g, m, v, n, b1, b2, lr, s, eps);
	}
	double c1 = 1 - b1, c2 = 1 - b2;
	for (; i < n; i++) {
		double mi = b1 * m[i] + c1 * g[i];
		double vi = b2 * v[i] + c2 * (g[i] * g[i]);
		m[i] = mi;
		v[i] = vi;
		p[i] -= lr * mi / (sqrt(vi) * s + eps);
	}
}
*/
import "C"

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"
)

// Built with -tags openblas (cgo, Debian libopenblas-dev), the process's
// blas64 and blas32 implementation is gonum's with Dgemm and Sgemm done by
// OpenBLAS: every Gemm in this package, and in any other package of the
// process, runs there. OpenBLAS picks its thread count from OPENBLAS_NUM_THREADS
// (default: one per core); set it to 1 when several trainers share a
// machine.
func init() {
	blas64.Use(openBLAS{})
	blas32.Use(openBLAS{})
}

// BLAS names the blas64 backend this build uses.
const BLAS = "openblas"

// Kernels names the kernels in use: "openblas" in this build.
func Kernels() string { return BLAS }

// narrow and widen convert between the float64 variables and a float32
// computation.
func narrow(dst []float32, src []float64) {
	for i, v := range src {
		dst[i] = float32(v)
	}
}

func widen(dst []float64, src []float32) {
	for i, v := range src {
		dst[i] = float64(v)
	}
}

func add32(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

// openBLAS is gonum's pure-Go BLAS with Dgemm and Sgemm replaced by
// OpenBLAS's.
type openBLAS struct{ gonum.Implementation }

func trans(t blas.Transpose) C.enum_CBLAS_TRANSPOSE {
	if t == blas.NoTrans {
		return C.CblasNoTrans
	}
	return C.CblasTrans
}

// gemmArgsOK reports whether a row-major gemm call's sizes are non-degenerate
// and consistent with its slices (la, lb, lc elements), so that cblas may be
// called with pointers to their first elements.
func gemmArgsOK(tA, tB blas.Transpose, m, n, k, lda, ldb, ldc, la, lb, lc int) bool {
	ar, ac := m, k
	if tA != blas.NoTrans {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB != blas.NoTrans {
		br, bc = n, k
	}
	return m >= 1 && n >= 1 && k >= 1 && lda >= max(1, ac) && ldb >= max(1, bc) && ldc >= max(1, n) &&
		la >= lda*(ar-1)+ac && lb >= ldb*(br-1)+bc && lc >= ldc*(m-1)+n
}

// Dgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices.
// Degenerate or inconsistent arguments go to gonum, which handles the
// former and panics on the latter as the blas contract asks.
func (o openBLAS) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if !gemmArgsOK(tA, tB, m, n, k, lda, ldb, ldc, len(a), len(b), len(c)) {
		o.Implementation.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	C.cblas_dgemm(C.CblasRowMajor, trans(tA), trans(tB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.double(alpha), (*C.double)(&a[0]), C.blasint(lda), (*C.double)(&b[0]), C.blasint(ldb),
		C.double(beta), (*C.double)(&c[0]), C.blasint(ldc))
}

func adamStep(params, grad, m, v []float64, b1, b2, lr, s, eps float64) {
	n := len(grad)
	if n == 0 {
		return
	}
	params, m, v = params[:n], m[:n], v[:n]
	C.adam_step((*C.double)(&params[0]), (*C.double)(&grad[0]), (*C.double)(&m[0]), (*C.double)(&v[0]),
		C.long(n), C.double(b1), C.double(b2), C.double(lr), C.double(s), C.double(eps))
}

// Sgemm is Dgemm for float32.
func (o openBLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !gemmArgsOK(tA, tB, m, n, k, lda, ldb, ldc, len(a), len(b), len(c)) {
		o.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	C.cblas_sgemm(C.CblasRowMajor, trans(tA), trans(tB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb),
		C.float(beta), (*C.float)(&c[0]), C.blasint(ldc))
}

// gemm32 is blas32.Gemm, which this build routes to OpenBLAS.
func gemm32(tA, tB blas.Transpose, alpha float32, a, b blas32.General, beta float32, c blas32.General) {
	blas32.Gemm(tA, tB, alpha, a, b, beta, c)
}

// gemm is blas64.Gemm, which this build routes to OpenBLAS.
func gemm(tA, tB blas.Transpose, alpha float64, a, b blas64.General, beta float64, c blas64.General) {
	blas64.Gemm(tA, tB, alpha, a, b, beta, c)
}

// packing is the packing space of one goroutine's serial products in
// the kernel build; OpenBLAS packs on its own.
type packing[T float] struct{}

// gemmSerial and gemm32Serial are gemm and gemm32: OpenBLAS's own threads
// are the operator's business (OPENBLAS_NUM_THREADS).
func gemmSerial(_ *packing[float64], tA, tB blas.Transpose, alpha float64, a, b blas64.General, beta float64, c blas64.General) {
	gemm(tA, tB, alpha, a, b, beta, c)
}

func gemm32Serial(_ *packing[float32], tA, tB blas.Transpose, alpha float32, a, b blas32.General, beta float32, c blas32.General) {
	gemm32(tA, tB, alpha, a, b, beta, c)
}
