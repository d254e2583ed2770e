//go:build !purego

package kernel

import "testing"

// BenchmarkFMAPeak measures one core's float32 FMA peak at the clock it
// runs now (24 independent YMM FMAs a loop, no memory operand), the
// denominator of a GEMM's efficiency: the nominal clock /proc/cpuinfo
// reports understates a boosting core. Run it in the same process and
// moment as BenchmarkSgemm (bench/train/run.sh does).
func BenchmarkFMAPeak(b *testing.B) {
	if asm == nil {
		b.Skip("no AVX2+FMA on this CPU: the portable kernels have no FMA peak to measure")
	}
	const n = 1 << 16
	for b.Loop() {
		fmaPeakAVX2(n)
	}
	b.ReportMetric(float64(n)*24*16*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
