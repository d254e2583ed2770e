package serving

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/preprocess"
)

// KServe V2 / Open Inference Protocol: named input tensors in, named output
// tensors out. Requests are turned into row instances and go through the
// same prediction path as the v1 API, so validation and features are the
// same. A classifier answers the tensors class [N] BYTES, class_index [N]
// INT64, probabilities [N, classes] FP64 and logits [N, outputs] FP64; a
// regressor answers value [N] FP64.

// v2Tensor is one named tensor of a V2 request or response.
type v2Tensor struct {
	Name     string            `json:"name"`
	Shape    []int64           `json:"shape"`
	Datatype string            `json:"datatype"`
	Data     []json.RawMessage `json:"data,omitempty"`
}

type v2Request struct {
	ID         string          `json:"id,omitempty"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Inputs     []v2Tensor      `json:"inputs"`
	Outputs    json.RawMessage `json:"outputs,omitempty"`
}

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
	if colType == preprocess.TypeNumber {
		return "FP64"
	}
	return "BYTES"
}

// v2Rows turns named input tensors into row instances. Every tensor must
// hold one value per row: shape [N] or [N, 1], N the same for all.
func v2Rows(req v2Request) ([]map[string]json.RawMessage, error) {
	if len(req.Inputs) == 0 {
		return nil, badRequest("no inputs: send {\"inputs\": [{\"name\": feature, \"shape\": [N], \"datatype\": \"FP64\"|\"BYTES\", \"data\": [...]}]}")
	}
	n := -1
	seen := map[string]bool{}
	for i, in := range req.Inputs {
		field := fmt.Sprintf("inputs[%d] (%q)", i, in.Name)
		if in.Name == "" || seen[in.Name] {
			return nil, badRequest("inputs[%d]: name is empty or repeated", i)
		}
		seen[in.Name] = true
		switch in.Datatype {
		case "FP64", "FP32", "FP16", "INT64", "INT32", "INT16", "INT8", "UINT64", "UINT32", "UINT16", "UINT8", "BYTES", "BOOL":
		default:
			return nil, badRequest("%s: datatype %q is not a V2 datatype", field, in.Datatype)
		}
		if len(in.Shape) == 0 || len(in.Shape) > 2 || (len(in.Shape) == 2 && in.Shape[1] != 1) || in.Shape[0] < 1 {
			return nil, badRequest("%s: shape %v: want [N] or [N, 1], one value per row", field, in.Shape)
		}
		if int64(len(in.Data)) != in.Shape[0] {
			return nil, badRequest("%s: %d values for shape %v", field, len(in.Data), in.Shape)
		}
		if n >= 0 && int(in.Shape[0]) != n {
			return nil, badRequest("%s: %d rows, other inputs have %d", field, in.Shape[0], n)
		}
		n = int(in.Shape[0])
	}
	rows := make([]map[string]json.RawMessage, n)
	for r := range rows {
		rows[r] = make(map[string]json.RawMessage, len(req.Inputs))
		for _, in := range req.Inputs {
			rows[r][in.Name] = in.Data[r]
		}
	}
	return rows, nil
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
	var req v2Request
	dec := json.NewDecoder(bytes.NewReader(sc.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return badRequest("request is not a V2 inference request: %v", err)
	}
	rows, err := v2Rows(req)
	if err != nil {
		return err
	}
	if len(rows) > s.opts.MaxInstances {
		return &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("%d rows, at most %d per request", len(rows), s.opts.MaxInstances)}
	}
	sc.rows = rows
	if err := sv.predict(sc, len(rows)); err != nil {
		return err
	}
	n := int64(len(rows))
	resp := v2Response{ModelName: sv.Model, ModelVersion: sv.versionText, ID: req.ID}
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
		idx[i] = argmax(sc.probs[int64(i)*classes : int64(i+1)*classes])
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
		inputs = append(inputs, tensorMeta{Name: in.Name, Datatype: v2Datatype(in.Type), Shape: []int64{-1}})
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
	if !ValidName(name) {
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
