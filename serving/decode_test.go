package serving

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
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
	sig, ok := scanPredict(&in, body)
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
