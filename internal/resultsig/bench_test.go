package resultsig

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkSignCheck measures the MAC of one activity result, signed by
// the activity's worker and checked by the workflow's, over results of
// several sizes (a TrainResult is ~60 bytes; a tuning report a few KiB;
// 1 MiB is about half of Temporal's payload limit).
func BenchmarkSignCheck(b *testing.B) {
	k, err := Parse([]byte("k " + strings.Repeat("ab", 32) + "\n"))
	if err != nil {
		b.Fatal(err)
	}
	bind := binding{namespace: "default", workflowID: "census_1", runID: "0192-run", activityType: "Train", seq: 7}
	for _, n := range []int{64, 4 << 10, 1 << 20} {
		data := []byte(strings.Repeat("x", n))
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				id, mac := k.mac(message("result", bind, "12", 1, []byte("json/plain"), data))
				if err := k.check(id, message("result", bind, "12", 1, []byte("json/plain"), data), mac); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
