package train

import (
	"fmt"
	"testing"
)

func BenchmarkAdam(b *testing.B) {
	for _, n := range []int{1000, 109386, 1000000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			a := NewAdam(1e-3, n)
			p, g := make([]float64, n), make([]float64, n)
			for i := range g {
				g[i] = float64(i%13) - 6
			}
			b.ReportAllocs()
			for b.Loop() {
				a.Update(p, g)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mparams/s")
		})
	}
}
