package preprocess

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func f64(v float64) *float64 { return &v }

// fnvRef is an independent FNV-1a reference (hash/fnv) of parts joined by
// 0xff.
func fnvRef(parts ...[]byte) uint64 {
	h := fnv.New64a()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0xff})
		}
		h.Write(p)
	}
	return h.Sum64()
}

func le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func oneHot(width, id int) []float64 {
	v := make([]float64, width)
	v[id] = 1
	return v
}

// fitRows fits a Transform of schema s on CSV lines.
func fitRows(t *testing.T, s Schema, lines []string) *Transform {
	t.Helper()
	st := NewStats(&s)
	row := make([]Value, len(s.Columns))
	for _, l := range lines {
		if err := s.ParseCSV(row, l); err != nil {
			t.Fatalf("ParseCSV(%q): %v", l, err)
		}
		st.Add(&s, row)
	}
	tr, err := Fit(s, st)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseTransform(must(tr.Marshal()))
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	return back
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// oneColumn is a schema of column c and a binary label y.
func oneColumn(c Column, crosses ...Cross) Schema {
	return Schema{Columns: []Column{c, {Name: "y", Type: TypeString}}, Crosses: crosses, Label: "y", LabelKind: LabelBinary}
}

func TestTreatments(t *testing.T) {
	nums := func(xs ...float64) []string {
		var out []string
		for i, x := range xs {
			out = append(out, fmt.Sprintf("%v,%s", x, []string{"a", "b"}[i%2]))
		}
		return out
	}
	var oneTo100 []float64
	for i := 1; i <= 100; i++ {
		oneTo100 = append(oneTo100, float64(i))
	}
	strs := func(vs ...string) []string {
		var out []string
		for i, v := range vs {
			out = append(out, fmt.Sprintf("%s,%s", v, []string{"a", "b"}[i%2]))
		}
		return out
	}
	abc := strs("a", "a", "a", "a", "a", "b", "b", "b", "c")
	oov := func(v string, n int) int { return int(fnvRef([]byte(v)) % uint64(n)) }
	tests := []struct {
		name  string
		col   Column
		train []string
		in    string // one raw CSV field; "" is missing
		want  []float64
		dim   int
	}{
		{name: "zscore", col: Column{Name: "x", Type: TypeNumber}, train: nums(1, 3), in: "4", want: []float64{2}},
		{name: "zscore missing takes default", col: Column{Name: "x", Type: TypeNumber, Default: str("3")}, train: nums(1, 3), in: "", want: []float64{1}},
		{name: "zscore constant column", col: Column{Name: "x", Type: TypeNumber}, train: nums(5, 5), in: "7", want: []float64{2}},
		{name: "zscore log1p", col: Column{Name: "x", Type: TypeNumber, Log1P: true}, train: nums(0, math.E*math.E-1), in: "-5", want: []float64{-1}},
		{name: "min_max", col: Column{Name: "x", Type: TypeNumber, Treatment: MinMax}, train: nums(0, 10, 4), in: "5", want: []float64{0.5}},
		{name: "min_max beyond range", col: Column{Name: "x", Type: TypeNumber, Treatment: MinMax}, train: nums(0, 10), in: "20", want: []float64{2}},
		{name: "min_max constant", col: Column{Name: "x", Type: TypeNumber, Treatment: MinMax}, train: nums(3, 3), in: "9", want: []float64{0}},
		{name: "clip before stats and apply", col: Column{Name: "x", Type: TypeNumber, Treatment: MinMax, ClipMin: f64(2), ClipMax: f64(10)}, train: nums(0, 100), in: "50", want: []float64{1}},
		{name: "clip low", col: Column{Name: "x", Type: TypeNumber, Treatment: MinMax, ClipMin: f64(2), ClipMax: f64(10)}, train: nums(0, 100), in: "-7", want: []float64{0}},
		{name: "clip then log1p", col: Column{Name: "x", Type: TypeNumber, Treatment: MinMax, Log1P: true, ClipMax: f64(math.E - 1)}, train: nums(0, 1000), in: "500", want: []float64{1}},
		{name: "bucketize one-hot below first", col: Column{Name: "x", Type: TypeNumber, Treatment: Bucketize, Buckets: 4}, train: nums(oneTo100...), in: "24.9", want: oneHot(4, 0)},
		{name: "bucketize on boundary", col: Column{Name: "x", Type: TypeNumber, Treatment: Bucketize, Buckets: 4}, train: nums(oneTo100...), in: "25", want: oneHot(4, 1)},
		{name: "bucketize above last", col: Column{Name: "x", Type: TypeNumber, Treatment: Bucketize, Buckets: 4}, train: nums(oneTo100...), in: "1e9", want: oneHot(4, 3)},
		{name: "bucketize index", col: Column{Name: "x", Type: TypeNumber, Treatment: Bucketize, Buckets: 4, Output: OutputIndex}, train: nums(oneTo100...), in: "60", want: []float64{2}},
		{name: "bucketize duplicate quantiles merge", col: Column{Name: "x", Type: TypeNumber, Treatment: Bucketize, Buckets: 10, Output: OutputIndex}, train: nums(1, 1, 1, 1, 1, 1, 1, 1, 1, 2), in: "2", want: []float64{1}},
		{name: "bucketize missing default", col: Column{Name: "x", Type: TypeNumber, Treatment: Bucketize, Buckets: 4, Default: str("99")}, train: nums(oneTo100...), in: "", want: oneHot(4, 3)},
		{name: "one_hot known", col: Column{Name: "s", Type: TypeString}, train: abc, in: "b", want: oneHot(4, 1)},
		{name: "one_hot OOV slot", col: Column{Name: "s", Type: TypeString}, train: abc, in: "zzz", want: oneHot(4, 3)},
		{name: "one_hot missing default", col: Column{Name: "s", Type: TypeString, Default: str("c")}, train: abc, in: "", want: oneHot(4, 2)},
		{name: "one_hot missing default OOV", col: Column{Name: "s", Type: TypeString, Default: str("?")}, train: abc, in: "", want: oneHot(4, 3)},
		{name: "top_k", col: Column{Name: "s", Type: TypeString, TopK: 2}, train: abc, in: "c", want: oneHot(3, 2)},
		{name: "min_frequency", col: Column{Name: "s", Type: TypeString, MinFrequency: 4}, train: abc, in: "b", want: oneHot(2, 1)},
		{name: "oov buckets", col: Column{Name: "s", Type: TypeString, NumOOVBuckets: 5}, train: abc, in: "zzz", want: oneHot(8, 3+oov("zzz", 5))},
		{name: "oov buckets other", col: Column{Name: "s", Type: TypeString, NumOOVBuckets: 5}, train: abc, in: "Holand-Netherlands", want: oneHot(8, 3+oov("Holand-Netherlands", 5))},
		{name: "index known", col: Column{Name: "s", Type: TypeString, Treatment: Index}, train: abc, in: "c", want: []float64{2}},
		{name: "index OOV", col: Column{Name: "s", Type: TypeString, Treatment: Index}, train: abc, in: "q", want: []float64{3}},
		{name: "index OOV buckets", col: Column{Name: "s", Type: TypeString, Treatment: Index, MinFrequency: 2, NumOOVBuckets: 7}, train: abc, in: "c", want: []float64{float64(2 + oov("c", 7))}},
		{name: "hash one-hot", col: Column{Name: "s", Type: TypeString, Treatment: Hash, HashBuckets: 10}, train: abc, in: "Sales", want: oneHot(10, oov("Sales", 10))},
		{name: "hash index", col: Column{Name: "s", Type: TypeString, Treatment: Hash, HashBuckets: 1000, Output: OutputIndex}, train: abc, in: "Sales", want: []float64{float64(oov("Sales", 1000))}},
		{name: "hash missing default", col: Column{Name: "s", Type: TypeString, Treatment: Hash, HashBuckets: 1000, Output: OutputIndex, Default: str("?")}, train: abc, in: "", want: []float64{float64(oov("?", 1000))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := fitRows(t, oneColumn(tt.col), tt.train)
			row := make([]Value, 2)
			if err := tr.Schema.ParseCSV(row, tt.in+",a"); err != nil {
				t.Fatalf("ParseCSV: %v", err)
			}
			got := make([]float64, tr.Dim)
			for i := range got {
				got[i] = math.NaN() // Apply must write every slot
			}
			tr.Apply(got, row)
			if !slices.EqualFunc(got, tt.want, func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }) {
				t.Errorf("Apply(%q) = %v, want %v (features %+v)", tt.in, got, tt.want, tr.Features)
			}
		})
	}
}

func TestCrosses(t *testing.T) {
	s := Schema{
		Columns: []Column{
			{Name: "edu", Type: TypeString},
			{Name: "occ", Type: TypeString, Treatment: Hash, HashBuckets: 3},
			{Name: "age", Type: TypeNumber, Treatment: Bucketize, Buckets: 2, ClipMax: f64(60)},
			{Name: "y", Type: TypeString},
		},
		Crosses: []Cross{
			{Name: "edu_x_occ", Columns: []string{"edu", "occ"}, HashBuckets: 50},
			{Name: "age_x_edu", Columns: []string{"age", "edu"}, HashBuckets: 1 << 20, Output: OutputIndex},
		},
		Label: "y", LabelKind: LabelBinary,
	}
	tr := fitRows(t, s, []string{"BS,Sales,20,a", "MS,Tech,40,b", "BS,Tech,60,a", "HS,Sales,80,b"})
	// edu one-hot 3+1, occ hash 3, age 2 buckets (boundary 40), crosses 50 + 1.
	if tr.Dim != 4+3+2+50+1 {
		t.Fatalf("dim = %d, want 60", tr.Dim)
	}
	row := make([]Value, 4)
	x := make([]float64, tr.Dim)
	for _, in := range []string{"BS,Sales,20,a", "PhD,Farming,1000,a"} {
		if err := s.ParseCSV(row, in); err != nil {
			t.Fatal(err)
		}
		tr.Apply(x, row)
		f := strings.Split(in, ",")
		eo := int(fnvRef([]byte(f[0]), []byte(f[1])) % 50)
		if got := x[9 : 9+50]; !slices.Equal(got, oneHot(50, eo)) {
			t.Errorf("%s: edu_x_occ = %v, want one-hot %d", in, got, eo)
		}
		age := uint64(0)
		if row[2].Num >= 40 { // 1000 clipped to 60, still bucket 1
			age = 1
		}
		ae := float64(fnvRef(le(age), []byte(f[0])) % (1 << 20))
		if x[59] != ae {
			t.Errorf("%s: age_x_edu = %v, want %v", in, x[59], ae)
		}
	}
	sig := tr.Signature()
	if len(sig) != 3 || sig[0].Name != "edu" || sig[2].Name != "age" {
		t.Errorf("signature %+v, want edu, occ, age", sig)
	}
}

func TestSchemaValidateTreatments(t *testing.T) {
	tests := []struct {
		name string
		col  Column
		x    []Cross
	}{
		{name: "bucketize one bucket", col: Column{Name: "x", Type: TypeNumber, Treatment: Bucketize, Buckets: 1}},
		{name: "hash on number", col: Column{Name: "x", Type: TypeNumber, Treatment: Hash, HashBuckets: 3}},
		{name: "hash no buckets", col: Column{Name: "x", Type: TypeString, Treatment: Hash}},
		{name: "min_max on string", col: Column{Name: "x", Type: TypeString, Treatment: MinMax}},
		{name: "clip reversed", col: Column{Name: "x", Type: TypeNumber, ClipMin: f64(2), ClipMax: f64(1)}},
		{name: "clip on string", col: Column{Name: "x", Type: TypeString, ClipMin: f64(2)}},
		{name: "output on zscore", col: Column{Name: "x", Type: TypeNumber, Output: OutputIndex}},
		{name: "unknown output", col: Column{Name: "x", Type: TypeString, Treatment: Hash, HashBuckets: 2, Output: "dense"}},
		{name: "negative oov", col: Column{Name: "x", Type: TypeString, NumOOVBuckets: -1}},
		{name: "huge hash", col: Column{Name: "x", Type: TypeString, Treatment: Hash, HashBuckets: MaxBuckets + 1}},
		{name: "cross of one", col: Column{Name: "x", Type: TypeString}, x: []Cross{{Name: "c", Columns: []string{"x"}, HashBuckets: 2}}},
		{name: "cross of zscore", col: Column{Name: "x", Type: TypeNumber}, x: []Cross{{Name: "c", Columns: []string{"x", "y"}, HashBuckets: 2}}},
		{name: "cross unknown column", col: Column{Name: "x", Type: TypeString}, x: []Cross{{Name: "c", Columns: []string{"x", "z"}, HashBuckets: 2}}},
		{name: "cross name clash", col: Column{Name: "x", Type: TypeString}, x: []Cross{{Name: "x", Columns: []string{"x", "x"}, HashBuckets: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := oneColumn(tt.col, tt.x...)
			if err := s.Validate(); !errors.Is(err, ErrSchema) {
				t.Errorf("Validate() = %v, want ErrSchema", err)
			}
		})
	}
	bad := CensusSchema()
	bad.Format = "parquet"
	if err := bad.Validate(); !errors.Is(err, ErrSchema) {
		t.Errorf("format parquet: Validate() = %v, want ErrSchema", err)
	}
	if err := (&Schema{}).Validate(); err == nil {
		t.Error("empty schema validated")
	}
	wide := CensusWideSchema()
	if err := wide.Validate(); err != nil {
		t.Errorf("CensusWideSchema: %v", err)
	}
}

func TestLabels(t *testing.T) {
	multi := Schema{Columns: []Column{{Name: "x", Type: TypeNumber}, {Name: "y", Type: TypeString}}, Label: "y", LabelKind: LabelMulticlass}
	tr := fitRows(t, multi, []string{"1,cat", "2,dog", "3,bird", "4,dog"})
	if !slices.Equal(tr.LabelVocab, []string{"bird", "cat", "dog"}) || tr.Classes() != 3 {
		t.Fatalf("label vocab %q, want [bird cat dog]", tr.LabelVocab)
	}
	for in, want := range map[string]float64{"bird": 0, "dog": 2} {
		if got, err := tr.Label([]Value{{}, {Str: in}}); err != nil || got != want {
			t.Errorf("Label(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := tr.Label([]Value{{}, {Str: "fish"}}); !errors.Is(err, ErrRow) {
		t.Errorf("Label(fish) error %v, want ErrRow", err)
	}
	fixed := multi
	fixed.LabelVocab = []string{"dog", "cat", "bird", "fish"}
	tr = fitRows(t, fixed, []string{"1,cat", "2,dog"})
	if got, _ := tr.Label([]Value{{}, {Str: "fish"}}); got != 3 || tr.Classes() != 4 {
		t.Errorf("fixed vocab: Label(fish) = %v, classes %d; want 3, 4", got, tr.Classes())
	}

	reg := Schema{Columns: []Column{{Name: "x", Type: TypeString}, {Name: "price", Type: TypeNumber}}, Label: "price", LabelKind: LabelRegression}
	tr = fitRows(t, reg, []string{"a,1.5", "b,2.5"})
	if tr.Classes() != 0 || tr.Dim != 3 {
		t.Fatalf("regression: classes %d dim %d, want 0 and 3 (the label is no feature)", tr.Classes(), tr.Dim)
	}
	row := make([]Value, 2)
	if err := reg.ParseCSV(row, "a, 123.25"); err != nil {
		t.Fatal(err)
	}
	if y, err := tr.Label(row); err != nil || y != 123.25 {
		t.Errorf("regression Label = %v, %v; want 123.25", y, err)
	}
	var re *RowError
	if err := reg.ParseCSV(row, "a,"); !errors.As(err, &re) || re.Reason != ReasonEmptyLabel {
		t.Errorf("empty regression label: %v, want %s", err, ReasonEmptyLabel)
	}
	if err := reg.ParseCSV(row, "a,cheap"); !errors.As(err, &re) || re.Reason != ReasonBadNumber {
		t.Errorf("text regression label: %v, want %s", err, ReasonBadNumber)
	}
}

// TestSampleDeterministic checks that the quantile sample depends only on
// the rows, not on how they are cut into blocks or merged.
func TestSampleDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = rng.Float64()
	}
	build := func(cuts []int, order []int) Sample {
		parts := make([]Sample, len(cuts)-1)
		for p := range parts {
			for i := cuts[p]; i < cuts[p+1]; i++ {
				parts[p].add(priority(uint64(i), 0), xs[i])
			}
			parts[p].finish()
		}
		var all Sample
		for _, p := range order {
			all.merge(&parts[p])
		}
		return all
	}
	a := build([]int{0, n}, []int{0})
	b := build([]int{0, 5000, 9000, 15000, n}, []int{2, 0, 3, 1})
	c := build([]int{0, 1, 19999, n}, []int{1, 2, 0})
	if !slices.Equal(a.Items, b.Items) || !slices.Equal(a.Items, c.Items) || len(a.Items) != SampleSize {
		t.Fatalf("samples differ across block plans (sizes %d %d %d)", len(a.Items), len(b.Items), len(c.Items))
	}
	q := a.Quantiles(4)
	for i, want := range []float64{0.25, 0.5, 0.75} {
		if math.Abs(q[i]-want) > 0.03 {
			t.Errorf("quantile %v = %v, want within 0.03", want, q[i])
		}
	}
	var small Sample
	for i, x := range []float64{5, 1, 4, 2, 3} {
		small.add(priority(uint64(i), 0), x)
	}
	small.finish()
	if got := small.Quantiles(5); !slices.Equal(got, []float64{1, 2, 3, 4}) {
		t.Errorf("exact quantiles of 5 values = %v, want [1 2 3 4]", got)
	}
}

func TestApplyAllocatesNothing(t *testing.T) {
	tr, rows := wideFixture(t, 200)
	x := make([]float64, tr.Dim)
	if n := testing.AllocsPerRun(100, func() {
		for _, r := range rows {
			tr.Apply(x, r)
		}
	}); n != 0 {
		t.Errorf("Apply allocates %v times per %d rows, want 0", n, len(rows))
	}
}

// wideFixture fits CensusWideSchema on n generated rows and returns them
// parsed.
func wideFixture(tb testing.TB, n int) (*Transform, [][]Value) {
	tb.Helper()
	s := CensusWideSchema()
	st := NewStats(&s)
	var rows [][]Value
	for _, line := range censusLines(tb, n, 3, false) {
		row := make([]Value, len(s.Columns))
		if err := s.ParseCSV(row, line); err != nil {
			tb.Fatal(err)
		}
		st.Add(&s, row)
		rows = append(rows, row)
	}
	tr, err := Fit(s, st)
	if err != nil {
		tb.Fatal(err)
	}
	return tr, rows
}

func BenchmarkApply(b *testing.B) {
	for _, name := range []string{"census", "census_wide"} {
		tr, rows := wideFixture(b, 1000)
		if name == "census" {
			s := CensusSchema()
			st := NewStats(&s)
			for _, r := range rows {
				st.Add(&s, r[:len(s.Columns)])
			}
			tr = must(Fit(s, st))
		}
		b.Run(fmt.Sprintf("%s/dim=%d", name, tr.Dim), func(b *testing.B) {
			x := make([]float64, tr.Dim)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tr.Apply(x, rows[i%len(rows)])
				i++
			}
		})
	}
}

func BenchmarkParseCSV(b *testing.B) {
	s := CensusSchema()
	lines := censusLines(b, 1000, 3, false)
	p := must(s.parser(""))
	row := make([]Value, len(s.Columns))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := p.parse(row, lines[i%len(lines)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
