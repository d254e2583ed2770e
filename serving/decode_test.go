package serving

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"strings"
	"testing"
)

// strictInstances decodes body as the strict path does when every
// instance is an object: ok is false if encoding/json refuses it.
func strictInstances(body []byte) (signature string, insts []map[string]json.RawMessage, ok bool) {
	var req struct {
		SignatureName string                       `json:"signature_name"`
		Instances     []map[string]json.RawMessage `json:"instances"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(&req) != nil {
		return "", nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", nil, false
	}
	return req.SignatureName, req.Instances, true
}

// checkScan fails t if scanPredict accepts body and encoding/json does not,
// or decodes it differently.
func checkScan(t *testing.T, body []byte) (accepted bool) {
	t.Helper()
	var in instances
	sig, ok := scanPredict(&in, body, noLimits)
	if !ok {
		return false
	}
	wantSig, want, wantOK := strictInstances(body)
	if !wantOK {
		t.Fatalf("scanPredict accepts %q, encoding/json refuses it", body)
	}
	if string(sig) != wantSig {
		t.Fatalf("%q: signature_name: got %q, want %q", body, sig, wantSig)
	}
	if in.len() != len(want) {
		t.Fatalf("%q: got %d instances, want %d", body, in.len(), len(want))
	}
	for i := range want {
		got := map[string]json.RawMessage{}
		for _, f := range in.features(i) {
			got[string(f.key)] = f.val
		}
		if !maps.EqualFunc(got, want[i], func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Fatalf("%q: instance %d: got %s, want %s", body, i, got, want[i])
		}
	}
	return true
}

// scanSeeds are bodies of every form: the fast path's, and all it must
// leave to encoding/json.
var scanSeeds = []struct {
	body   string
	accept bool
}{
	{`{"instances":[{"age":39,"workclass":"State-gov"}]}`, true},
	{` { "instances" : [ { "age" : -3.5e+2 , "w" : "a\"b\u00e9" } , {"x":[1,{"y":null}],"z":true} ] } ` + "\n", true},
	{`{"signature_name":"serving_default","instances":[{"a":1}]}`, true},
	{`{"instances":[{"a":1}],"signature_name":"x"}`, true},
	{`{"instances":[{"a":1,"a":2}]}`, true},
	{`{"instances":[{"a":"` + "\xff" + `"}]}`, true},
	{`{"instances":[{"a":0.5e-7,"b":1E9,"c":-0}]}`, true},
	{`{"instances":[]}`, false},
	{`{"instances":[{}]}`, false},
	{`{"instances":[{"a":1},null]}`, false},
	{`{"instances":[5]}`, false},
	{`{"instances":{"a":1}}`, false},
	{`{"Instances":[{"a":1}]}`, false},
	{`{"instances":[{"\u0061":1}]}`, false},
	{`{"instances":[{"é":1}]}`, false},
	{`{"inputs":{"a":[1]}}`, false},
	{`{"instances":[{"a":1}],"inputs":{}}`, false},
	{`{"instances":[{"a":1}],"instances":[{"a":2}]}`, false},
	{`{"signature_name":null,"instances":[{"a":1}]}`, false},
	{`{"signature_name":"s\u0031","instances":[{"a":1}]}`, false},
	{`{}`, false},
	{`null`, false},
	{``, false},
	{`{"instances":[{"a":1}]} x`, false},
	{`{"instances":[{"a":1}]}}`, false},
	{`{"instances":[{"a":1}]`, false},
	{`{"instances":[{"a":01}]}`, false},
	{`{"instances":[{"a":1.}]}`, false},
	{`{"instances":[{"a":.5}]}`, false},
	{`{"instances":[{"a":1e}]}`, false},
	{`{"instances":[{"a":+1}]}`, false},
	{`{"instances":[{"a":NaN}]}`, false},
	{`{"instances":[{"a":tru}]}`, false},
	{`{"instances":[{"a":"x` + "\n" + `"}]}`, false},
	{`{"instances":[{"a":"\x"}]}`, false},
	{`{"instances":[{"a":"\u12"}]}`, false},
	{`{"instances":[{"a":[1,]}]}`, false},
	{`{"instances":[{"a":{"b":1,}}]}`, false},
	{`{"instances":[{"a":1,}]}`, false},
	{`{"instances":[{"a":1}],}`, false},
	{`{"instances":[{"a":1} {"b":2}]}`, false},
	{`{"instances":[{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}`, false},
	{"\ufeff" + `{"instances":[{"a":1}]}`, false},
}

func TestScanPredict(t *testing.T) {
	for _, tc := range scanSeeds {
		if got := checkScan(t, []byte(tc.body)); got != tc.accept {
			t.Errorf("scanPredict(%q): got ok %v, want %v", tc.body, got, tc.accept)
		}
	}
}

// FuzzScanPredict checks that whatever scanPredict accepts, encoding/json
// accepts and decodes to the same features: the fast path never changes an
// answer.
func FuzzScanPredict(f *testing.F) {
	for _, tc := range scanSeeds {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkScan(t, body) })
}

// noLimits are limits no test body reaches.
var noLimits = limits{rows: 1 << 30, feats: 1 << 30}

// TestScanPredictLimits checks that the fast path declines a body over the
// limits (so that boundPredict refuses it) and never decodes past them.
func TestScanPredictLimits(t *testing.T) {
	lim := limits{rows: 2, feats: 2}
	for _, tc := range []struct {
		body   string
		accept bool
	}{
		{`{"instances":[{"a":1,"b":2},{"a":1}]}`, true},
		{`{"instances":[{"a":1},{"a":1},{"a":1}]}`, false},
		{`{"instances":[{"a":1,"b":2,"c":3}]}`, false},
		{`{"instances":[{"a":1,"a":2,"a":3}]}`, false},
	} {
		var in instances
		_, ok := scanPredict(&in, []byte(tc.body), lim)
		if ok != tc.accept {
			t.Errorf("scanPredict(%q): got ok %v, want %v", tc.body, ok, tc.accept)
		}
		if in.len() > lim.rows || len(in.feats) > lim.rows*lim.feats {
			t.Errorf("scanPredict(%q): decoded %d instances, %d features, past the limits %+v", tc.body, in.len(), len(in.feats), lim)
		}
	}
}

func TestBoundPredict(t *testing.T) {
	lim := limits{rows: 3, feats: 2}
	for _, tc := range []struct {
		body string
		want string // "" for no error
	}{
		{`{"instances":[{"a":1,"b":2},{},{}]}`, ""},
		{`{"instances":[{},{},{},{}]}`, "4 instances, at most 3"},
		{`{"Instances":[{},{},{},{},{}]}`, "5 instances, at most 3"},
		{`{"\u0069nstances":[1,2,3,4]}`, "4 instances, at most 3"},
		{`{"instances":[{"a":1,"b":2,"c":3}]}`, "instances[0] has 3 features, this model has 2"},
		{`{"instances":[{"a":[1,2,3,4]}]}`, "instances[0] holds a value of more than 3 elements"},
		{`{"instances":[{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}`, "nested more than 32 deep"},
		{`{"inputs":{"a":[1,2,3,4]}}`, "4 instances, at most 3"},
		{`{"inputs":{"a":[1],"b":[1],"c":[1]}}`, "inputs has 3 columns, this model has 2"},
		{`{"inputs":{"a":[[1,2,3,4]]}}`, "inputs.a holds a value"},
		{`{"instances":[{},{},{},{}`, ""}, // not JSON: the strict decoder says so
		{`[1,2,3,4]`, ""},
		{``, ""},
	} {
		err := boundPredict([]byte(tc.body), lim)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("boundPredict(%q): got %v, want no error", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("boundPredict(%q): got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}

// TestDecodeV2Bounds checks that decodeV2 refuses shapes and data over the
// row limit, and too many inputs, without allocating per value: a body of
// 650,000 values costs a handful of allocations (the error's).
func TestDecodeV2Bounds(t *testing.T) {
	lim := limits{rows: 1000, feats: 15}
	data := strings.Repeat("0,", 650_000)
	data = data[:len(data)-1]
	tensor := func(shape, data string) string {
		return `{"name":"age","shape":` + shape + `,"datatype":"FP64","data":[` + data + `]}`
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"shape [650000]", `{"inputs":[` + tensor("[650000]", data) + `]}`, "shape [650000] holds more than 1000 values"},
		{"data before shape", `{"inputs":[{"name":"age","data":[` + data + `],"shape":[650000],"datatype":"FP64"}]}`, "more than 1000 values"},
		{"shape [1] with 650000 values", `{"inputs":[` + tensor("[1]", data) + `]}`, "more than 1000 values"},
		{"650000 values nested in one row", `{"inputs":[` + tensor("[1]", "["+data+"]") + `]}`, "more than 1000 values"},
		{"values nested deep", `{"inputs":[` + tensor("[1]", strings.Repeat("[", 100)+"0"+strings.Repeat("]", 100)) + `]}`, "nested more than 32 deep"},
		{"object in data", `{"inputs":[` + tensor("[1]", `{"a":1}`) + `]}`, "not objects"},
		{"too many outputs", `{"outputs":[` + strings.Repeat(`{"name":"x"},`, 100) + `{"name":"x"}]}`, "outputs: more than 64"},
		{"shape product", `{"inputs":[` + tensor("[1000,1000,1000,1000,1000,1000,1000]", "0") + `]}`, "holds more than 1000 values"},
		{"many inputs", `{"inputs":[` + strings.Repeat(tensor("[1]", "0")+",", 100) + tensor("[1]", "0") + `]}`, "more than 15 inputs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d v2Decoded
			body := []byte(tc.body)
			var err error
			allocs := testing.AllocsPerRun(5, func() { err = decodeV2(&d, body, lim) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			// A handful (the error's; the race detector adds one), never
			// one per value.
			if allocs > 16 {
				t.Errorf("%v allocations for a body of %d bytes, want at most 16", allocs, len(body))
			}
		})
	}
}
