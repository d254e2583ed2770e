package jobspec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/train"
)

// tokenSpec is a spec of a sequential classifier over 12 token ids (a
// float_vector column of raw ids, scale 1) with layers spliced in.
func tokenSpec(layers string) string {
	return fmt.Sprintf(`{"job_id":"tok_1","data":{"train":["t.jsonl"],"eval":["e.jsonl"],"schema":{"format":"jsonl",
		"columns":[{"name":"tokens","type":"float_vector","length":12},{"name":"label","type":"string"}],
		"label":"label","label_kind":"multiclass","label_vocab":["a","b","c"]}},
		"model":{"type":"sequential","layers":%s}}`, layers)
}

// TestEmbeddingSpec: an embedding layer over the features is a valid
// stack with its table among the variables; one that is not over the
// features, or out of bounds, is an invalid spec naming
// model.layers[i] (embedding).
func TestEmbeddingSpec(t *testing.T) {
	s, err := decodeValid(tokenSpec(`[{"embedding":{"input_dim":100,"output_dim":8}},{"avg_pool2d":{"size":[1,12]}},{"flatten":{}},{"dense":{"units":3}}]`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := train.New(s.Model.CheckpointMeta(12, 3, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(m.Params()), 100*8+(8+1)*3; got != want {
		t.Errorf("%d variables, want %d (the 100×8 table and the dense layer)", got, want)
	}
	for _, c := range []struct{ name, layers, want string }{
		{"not over the features", `[{"dense":{"units":12}},{"embedding":{"input_dim":10,"output_dim":2}},{"flatten":{}},{"dense":{"units":3}}]`,
			`model.layers[1] (embedding): its input must be the model's features (integer ids), but layers[0] (dense) computes before it`},
		{"input_dim too large", `[{"embedding":{"input_dim":20000000,"output_dim":2}},{"flatten":{}},{"dense":{"units":3}}]`,
			`model.layers[0] (embedding): input_dim 20000000 not in [1, 16777216]`},
		{"table too large", `[{"embedding":{"input_dim":10000000,"output_dim":64}},{"flatten":{}},{"dense":{"units":3}}]`,
			`model.layers[0] (embedding): 10000000 ids × 64 has 640000000 variables, more than 268435456`},
		{"unknown field", `[{"embedding":{"input_dim":10,"units":2}},{"flatten":{}},{"dense":{"units":3}}]`,
			`model.layers[0].embedding.units: unknown field`},
		{"dense on the sequence", `[{"embedding":{"input_dim":10,"output_dim":2}},{"dense":{"units":3}}]`,
			`model.layers[1] (dense): needs a flat input, got 1x12x2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeValid(tokenSpec(c.layers))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an invalid spec containing %q", err, c.want)
			}
		})
	}
}
