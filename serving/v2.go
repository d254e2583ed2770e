package serving

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/preprocess"
	"github.com/trainflow/trainflow/train"
)

// KServe V2 / Open Inference Protocol: named input tensors in, named output
// tensors out. Requests are turned into row instances and go through the
// same prediction path as the v1 API, so validation and features are the
// same. A classifier answers the tensors class [N] BYTES, class_index [N]
// INT64, probabilities [N, classes] FP64 and logits [N, outputs] FP64; a
// regressor answers value [N] FP64.

type v2Output struct {
	Name     string  `json:"name"`
	Shape    []int64 `json:"shape"`
	Datatype string  `json:"datatype"`
	Data     any     `json:"data"`
}

type v2Response struct {
	ModelName    string     `json:"model_name"`
	ModelVersion string     `json:"model_version"`
	ID           string     `json:"id,omitempty"`
	Outputs      []v2Output `json:"outputs"`
}

// v2Datatype is the tensor type of a raw column.
func v2Datatype(colType string) string {
	if colType == preprocess.TypeNumber || colType == preprocess.TypeFloatVector {
		return "FP64"
	}
	return "BYTES"
}

func (s *Server) v2Infer(c echo.Context) error {
	sv, err := s.v2Servable(c)
	if err != nil {
		return err
	}
	setMetricLabels(c, sv)
	sc := getScratch()
	defer putScratch(sc)
	if err := s.readJSONBody(c, sc); err != nil {
		return err
	}
	if err := decodeV2(&sc.v2, sc.body, sv.limits(s.opts.MaxInstances)); err != nil {
		return err
	}
	rows, err := sv.v2Rows(sc)
	if err != nil {
		return err
	}
	if rows > s.opts.MaxInstances {
		return tooManyRows(rows, "rows", s.opts.MaxInstances)
	}
	sc.rows, sc.tensors = nil, true
	if err := sv.predict(sc, rows); err != nil {
		return err
	}
	n := int64(rows)
	resp := v2Response{ModelName: sv.Model, ModelVersion: sv.versionText, ID: string(sc.v2.id)}
	m := sv.Bundle.Model
	k, classes := int64(m.Outputs()), int64(m.NumClasses())
	if sv.regressor() {
		values := make([]float64, n)
		for i := range values {
			values[i] = sc.logits[int64(i)*k]
		}
		resp.Outputs = []v2Output{{Name: "value", Shape: []int64{n}, Datatype: "FP64", Data: values}}
		return c.JSON(http.StatusOK, resp)
	}
	idx := make([]int, n)
	names := make([]string, n)
	for i := range idx {
		idx[i] = train.Argmax(sc.probs[int64(i)*classes : int64(i+1)*classes])
		names[i] = sv.Transform.LabelVocab[idx[i]]
	}
	resp.Outputs = []v2Output{
		{Name: "class", Shape: []int64{n}, Datatype: "BYTES", Data: names},
		{Name: "class_index", Shape: []int64{n}, Datatype: "INT64", Data: idx},
		{Name: "probabilities", Shape: []int64{n, classes}, Datatype: "FP64", Data: sc.probs},
		{Name: "logits", Shape: []int64{n, k}, Datatype: "FP64", Data: sc.logits},
	}
	return c.JSON(http.StatusOK, resp)
}

func (s *Server) v2Metadata(c echo.Context) error {
	sv, err := s.v2Servable(c)
	if err != nil {
		return err
	}
	name := sv.Model
	versions, _, err := s.reg.Status(name)
	if err != nil {
		return err
	}
	vs := make([]string, len(versions))
	for i, v := range versions {
		vs[i] = strconv.FormatInt(v, 10)
	}
	type tensorMeta struct {
		Name     string  `json:"name"`
		Datatype string  `json:"datatype"`
		Shape    []int64 `json:"shape"`
	}
	var inputs []tensorMeta
	for _, in := range sv.Transform.Signature() {
		shape := []int64{-1}
		if in.Type == preprocess.TypeFloatVector {
			shape = []int64{-1, int64(in.Length)}
		}
		inputs = append(inputs, tensorMeta{Name: in.Name, Datatype: v2Datatype(in.Type), Shape: shape})
	}
	outputs := []tensorMeta{{"class", "BYTES", []int64{-1}}, {"class_index", "INT64", []int64{-1}},
		{"probabilities", "FP64", []int64{-1, int64(len(sv.Transform.LabelVocab))}}, {"logits", "FP64", []int64{-1, int64(sv.Bundle.Model.Outputs())}}}
	if sv.regressor() {
		outputs = []tensorMeta{{"value", "FP64", []int64{-1}}}
	}
	return c.JSON(http.StatusOK, map[string]any{"name": name, "versions": vs, "platform": "trainflow", "inputs": inputs, "outputs": outputs})
}

func (s *Server) v2ModelReady(c echo.Context) error {
	sv, err := s.v2Servable(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"name": sv.Model, "ready": true})
}

// v2Servable resolves the :name and optional :version of a V2 route.
func (s *Server) v2Servable(c echo.Context) (*Servable, error) {
	name := c.Param("name")
	if !bundle.ValidName(name) {
		return nil, badRequest("model name %q: letters, digits and '_', starting with a letter", name)
	}
	version, err := parseVersion(c.Param("version"))
	if err != nil {
		return nil, err
	}
	return s.reg.Get(name, version)
}

// parseVersion parses an optional version path segment ("" → 0, the default).
func parseVersion(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, badRequest("version %q is not a positive integer", v)
	}
	return n, nil
}
