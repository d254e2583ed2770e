//go:build !(cgo && openblas)

package train

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/trainflow/trainflow/train/internal/kernel"
)

// BLAS names the GEMM backend of this build: "kernel", trainflow's own
// (train/internal/kernel: AVX2+FMA assembly where the CPU has it, Go
// elsewhere, large products split across the cores), unless built with
// -tags openblas (see openblas.go). Kernels names the implementation.
const BLAS = "kernel"

// Kernels names the kernels in use: "avx2", or "generic" on other CPUs
// and when the operator sets TRAINFLOW_KERNELS=generic.
func Kernels() string { return kernel.Impl() }

func adamStep(params, grad, m, v []float64, b1, b2, lr, s, eps float64) {
	kernel.Adam(params, grad, m, v, b1, b2, lr, s, eps)
}

// narrow and widen convert between the float64 variables and a float32
// computation; add32 is dst += src.
func narrow(dst []float32, src []float64) { kernel.Narrow(dst, src) }
func widen(dst []float64, src []float32)  { kernel.Widen(dst, src) }
func add32(dst, src []float32)            { kernel.Add(dst, src) }

// gemm is blas64.Gemm, C = alpha·op(A)·op(B) + beta·C, through
// kernel.Dgemm.
func gemm(tA, tB blas.Transpose, alpha float64, a, b blas64.General, beta float64, c blas64.General) {
	m, k := a.Rows, a.Cols
	if tA != blas.NoTrans {
		m, k = k, m
	}
	kernel.Dgemm(tA, tB, m, c.Cols, k, alpha, a.Data, a.Stride, b.Data, b.Stride, beta, c.Data, c.Stride)
}

// gemm32 is gemm for float32, through kernel.Sgemm.
func gemm32(tA, tB blas.Transpose, alpha float32, a, b blas32.General, beta float32, c blas32.General) {
	m, k := a.Rows, a.Cols
	if tA != blas.NoTrans {
		m, k = k, m
	}
	kernel.Sgemm(tA, tB, m, c.Cols, k, alpha, a.Data, a.Stride, b.Data, b.Stride, beta, c.Data, c.Stride)
}

// packing is the packing space of one goroutine's serial products
// (gemmTOn), kept with the rest of a batch part's scratch.
type packing[T float] = kernel.Scratch[T]

// gemmSerial and gemm32Serial are gemm and gemm32 on the calling goroutine
// only, packing into pk (kernel.DgemmSerialIn, kernel.SgemmSerialIn),
// for work already split across the cores.
func gemmSerial(pk *packing[float64], tA, tB blas.Transpose, alpha float64, a, b blas64.General, beta float64, c blas64.General) {
	m, k := a.Rows, a.Cols
	if tA != blas.NoTrans {
		m, k = k, m
	}
	kernel.DgemmSerialIn(pk, tA, tB, m, c.Cols, k, alpha, a.Data, a.Stride, b.Data, b.Stride, beta, c.Data, c.Stride)
}

func gemm32Serial(pk *packing[float32], tA, tB blas.Transpose, alpha float32, a, b blas32.General, beta float32, c blas32.General) {
	m, k := a.Rows, a.Cols
	if tA != blas.NoTrans {
		m, k = k, m
	}
	kernel.SgemmSerialIn(pk, tA, tB, m, c.Cols, k, alpha, a.Data, a.Stride, b.Data, b.Stride, beta, c.Data, c.Stride)
}
