package dist

import (
	"encoding/json"
	"math"
	"testing"
)

// TestPositionJSONCarriesAnyRNGWords: a dropout source's state is raw
// 64-bit words, and about one step in a thousand one of them reads as a
// NaN. Heartbeat details carry the position as JSON: it must encode and
// come back bit for bit whatever the words are, and details written
// before the words were (rng as numbers) must still read.
func TestPositionJSONCarriesAnyRNGWords(t *testing.T) {
	words := []uint64{0x7ff8000000000001, 0x7ff0000000000000, 0xfff0000000000000, 1 << 63, 0x7ff4000000000000, 42}
	p := Position{GlobalStep: 799, Epoch: 1, Cursor: 26048}
	for _, w := range words {
		p.RNG = append(p.RNG, math.Float64frombits(w))
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("a position whose RNG words read as NaN and ±Inf does not encode: %v", err)
	}
	var got Position
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.GlobalStep != p.GlobalStep || got.Epoch != p.Epoch || got.Cursor != p.Cursor || len(got.RNG) != len(words) {
		t.Fatalf("decoded %+v from %s, want %+v", got, b, p)
	}
	for i, w := range words {
		if g := math.Float64bits(got.RNG[i]); g != w {
			t.Errorf("RNG word %d came back %#x, want %#x", i, g, w)
		}
	}
	var old Position
	if err := json.Unmarshal([]byte(`{"global_step":3,"epoch":1,"cursor":5,"rng":[1.5,-2.25e-300]}`), &old); err != nil || old.Cursor != 5 || len(old.RNG) != 2 || old.RNG[1] != -2.25e-300 {
		t.Fatalf("older details decoded as %+v, %v", old, err)
	}
}
