package preprocess

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func vectorSchema() Schema {
	return Schema{
		Columns: []Column{
			{Name: "image", Type: TypeFloatVector, Length: 3, Treatment: Scale, Scale: 255},
			{Name: "label", Type: TypeString},
		},
		Label:     "label",
		LabelKind: LabelMulticlass,
	}
}

// TestVectorTransform fits a float_vector column, checks Apply scales every
// element, and that the artifact round-trips (serving's copy applies the
// same scaling).
func TestVectorTransform(t *testing.T) {
	s := vectorSchema()
	st := NewStats(&s)
	row := make([]Value, 2)
	for _, line := range []string{`0 51 255,a`, `255 0 102,b`} {
		if err := s.ParseCSV(row, line); err != nil {
			t.Fatal(err)
		}
		st.Add(&s, row)
	}
	tr, err := Fit(s, st)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Dim != 3 {
		t.Fatalf("dim %d, want 3", tr.Dim)
	}
	b, err := tr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseTransform(b)
	if err != nil {
		t.Fatal(err)
	}
	var inst map[string]json.RawMessage
	json.Unmarshal([]byte(`{"image": [0, 51, 255]}`), &inst)
	if err := s.ParseInstance(row, inst); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Transform{tr, back} {
		dst := make([]float64, 3)
		x.Apply(dst, row)
		if dst[0] != 0 || dst[1] != 0.2 || dst[2] != 1 {
			t.Fatalf("Apply = %v, want [0 0.2 1]", dst)
		}
	}
}

// TestVectorBadInput: wrong lengths and non-numbers are row errors naming
// the column.
func TestVectorBadInput(t *testing.T) {
	s := vectorSchema()
	row := make([]Value, 2)
	for line, reason := range map[string]string{
		`1 2,a`:     ReasonWrongLength,
		`1 2 3 4,a`: ReasonWrongLength,
		`1 x 3,a`:   ReasonBadNumber,
		`1 NaN 3,a`: ReasonBadNumber,
	} {
		err := s.ParseCSV(row, line)
		var re *RowError
		if !errors.As(err, &re) || re.Reason != reason || re.Column != "image" {
			t.Errorf("CSV %q: got %v, want %s on image", line, err, reason)
		}
	}
	for js, reason := range map[string]string{
		`{"image": [1, 2]}`:        ReasonWrongLength,
		`{"image": [1, "2", 3]}`:   ReasonWrongType,
		`{"image": "1 2 3"}`:       ReasonWrongType,
		`{"image": 3}`:             ReasonWrongType,
		`{"image": [1, 2, 3e999]}`: ReasonWrongType,
	} {
		var inst map[string]json.RawMessage
		if err := json.Unmarshal([]byte(js), &inst); err != nil {
			t.Fatal(err)
		}
		err := s.ParseInstance(row, inst)
		var re *RowError
		if !errors.As(err, &re) || re.Column != "image" || (re.Reason != reason && !(reason == ReasonWrongType && re.Reason == ReasonBadNumber)) {
			t.Errorf("JSON %s: got %v, want %s on image", js, err, reason)
		}
		if err != nil && !strings.Contains(err.Error(), "image") {
			t.Errorf("JSON %s: error %q does not name the field", js, err)
		}
	}
	bad := vectorSchema()
	bad.Columns[0].Length = 0
	if err := bad.Validate(); !errors.Is(err, ErrSchema) {
		t.Errorf("length 0: got %v, want ErrSchema", err)
	}
}

// TestFixedDim: where a schema's feature width does not depend on the
// data, FixedDim gives the Dim that Fit gives; a vocabulary makes it
// unknown. Apply writes a float_vector row-major in place, so an IDX
// image of rows×cols is the NHWC layout of a [rows, cols, 1] input.
func TestFixedDim(t *testing.T) {
	s := Schema{
		Columns: []Column{
			{Name: "image", Type: TypeFloatVector, Length: 3, Scale: 255},
			{Name: "x", Type: TypeNumber},
			{Name: "h", Type: TypeString, Treatment: Hash, HashBuckets: 5},
			{Name: "i", Type: TypeString, Treatment: Index},
			{Name: "b", Type: TypeNumber, Treatment: Bucketize, Buckets: 3, Output: OutputIndex},
			{Name: "skip", Type: TypeString, Treatment: Ignore},
			{Name: "label", Type: TypeString},
		},
		Crosses:   []Cross{{Name: "hxi", Columns: []string{"h", "i"}, HashBuckets: 7}},
		Label:     "label",
		LabelKind: LabelMulticlass,
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	got, ok := s.FixedDim()
	if !ok || got != 3+1+5+1+1+7 {
		t.Fatalf("FixedDim = %d, %v, want 18, true", got, ok)
	}
	st := NewStats(&s)
	row := make([]Value, len(s.Columns))
	for _, line := range []string{`0 51 255,1,a,p,3,z,A`, `255 0 102,2,b,q,4,z,B`} {
		if err := s.ParseCSV(row, line); err != nil {
			t.Fatal(err)
		}
		st.Add(&s, row)
	}
	tr, err := Fit(s, st)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Dim != got {
		t.Fatalf("Fit's dim %d, FixedDim %d", tr.Dim, got)
	}
	for _, c := range []Column{
		{Name: "s", Type: TypeString},
		{Name: "b", Type: TypeNumber, Treatment: Bucketize, Buckets: 3},
	} {
		u := vectorSchema()
		u.Columns = append(u.Columns, c)
		if d, ok := u.FixedDim(); ok {
			t.Errorf("with column %+v: FixedDim = %d, true, want unknown", c, d)
		}
	}
}
