package serving

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/train"
)

// KServe V2 / Open Inference Protocol: named input tensors in, named output
// tensors out. Requests are turned into row instances and go through the
// same prediction path as the v1 API, so validation and features are the
// same. A classifier answers the tensors class [N] BYTES, class_index [N]
// INT64, probabilities [N, classes] FP64 and logits [N, outputs] FP64; a
// regressor answers value [N] FP64; a request's "outputs" selects among
// them.

func (s *Server) v2Infer(c echo.Context) error {
	name := c.Param("name")
	if !bundle.ValidName(name) {
		return badRequest("model name %q: letters, digits and '_', starting with a letter", name)
	}
	var version int64 // 0: routed
	if strings.HasPrefix(c.Path(), routeV2Version) {
		v, err := parseVersion(c.Param("version"))
		if err != nil {
			return err
		}
		version = v
	}
	sv, shadow, routed, err := s.pick(c, name, version, "")
	if err != nil {
		return err
	}
	setMetricLabels(c, sv)
	sc := getScratch()
	defer putScratch(sc)
	if err := s.readJSONBody(c, sc); err != nil {
		return err
	}
	s.capacity.begin()
	defer s.capacity.end()
	if h := c.Request().Header.Get(headerInferenceHeaderLength); h != "" {
		if n, err := strconv.Atoi(h); err != nil || n != len(sc.body) {
			return &httpError{code: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("%s %q: binary tensor data is not supported; send the data in JSON (tritonclient: binary_data=False)", headerInferenceHeaderLength, h)}
		}
	}
	if err := decodeV2(&sc.v2, sc.body, sv.limits(s.opts.MaxInstances)); err != nil {
		return err
	}
	outputs, err := sv.v2Outputs(sc.v2.outputs)
	if err != nil {
		return err
	}
	rows, err := s.v2Predict(sc, sv)
	if err != nil {
		return err
	}
	s.answered(c, sv, sc, rows, routed)
	if shadow != nil {
		s.enqueueShadow(shadow, sv, sc, rows, true)
	}
	c.Response().Header()[headerModelVersion] = sv.versionHeader
	resp := v2Response{ModelName: sv.Model, ModelVersion: sv.versionText, ID: string(sc.v2.id), Outputs: make([]v2Output, len(outputs))}
	for i, t := range outputs {
		resp.Outputs[i] = sv.v2Output(sc, rows, t)
	}
	return c.JSON(http.StatusOK, resp)
}

// v2Predict predicts with sv the rows of the V2 request decoded in
// sc.v2 and returns how many there were.
func (s *Server) v2Predict(sc *scratch, sv *Servable) (int, error) {
	rows, err := sv.v2Rows(sc)
	if err != nil {
		return 0, err
	}
	if rows > s.opts.MaxInstances {
		return 0, tooManyRows(rows, "rows", s.opts.MaxInstances)
	}
	sc.rows, sc.tensors = nil, true
	return rows, sv.predict(sc, rows)
}

// v2Outputs returns the outputs a request names, in its order, or every
// output of sv if it names none. An unknown name is a 400 naming it.
func (sv *Servable) v2Outputs(names [][]byte) ([]tensor, error) {
	if len(names) == 0 {
		return sv.outputs, nil
	}
	out := make([]tensor, 0, len(names))
	for i, name := range names {
		j := slices.IndexFunc(sv.outputs, func(t tensor) bool { return t.name == string(name) })
		if j < 0 {
			valid := make([]string, len(sv.outputs))
			for k, t := range sv.outputs {
				valid[k] = t.name
			}
			return nil, badRequest("outputs[%d].name %q: not an output of this model (%s)", i, clipKey(name), strings.Join(valid, ", "))
		}
		out = append(out, sv.outputs[j])
	}
	return out, nil
}

// v2Output is output t for the n rows of sc after predict.
func (sv *Servable) v2Output(sc *scratch, n int, t tensor) v2Output {
	k, classes := sv.Bundle.Model.Outputs(), sv.Bundle.Model.NumClasses()
	o := v2Output{Name: t.name, Datatype: t.v2Type, Shape: []int64{int64(n)}}
	if t.width > 0 {
		o.Shape = append(o.Shape, int64(t.width))
	}
	switch t.name {
	case outValue:
		values := make([]float64, n)
		for i := range values {
			values[i] = sc.logits[i*k]
		}
		o.Data = values
	case outClass, outClassIndex:
		idx := make([]int, n)
		names := make([]string, n)
		for i := range idx {
			idx[i] = train.Argmax(sc.probs[i*classes : (i+1)*classes])
			names[i] = sv.Transform.LabelVocab[idx[i]]
		}
		if o.Data = idx; t.name == outClass {
			o.Data = names
		}
	case outProbabilities:
		o.Data = sc.probs[:n*classes]
	case outLogits:
		o.Data = sc.logits[:n*k]
	}
	return o
}

// v2Server answers the server metadata: its name, version and the
// protocol extensions it supports (none).
func (s *Server) v2Server(c echo.Context) error {
	return c.JSON(http.StatusOK, v2ServerMetadata{Name: v2ServerName, Version: serverVersion(), Extensions: []string{}})
}

// serverVersion is the version of the trainflow module this binary was
// built from, "devel" when it has none (a build from a work tree).
func serverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func (s *Server) v2Metadata(c echo.Context) error {
	sv, err := s.v2Servable(c)
	if err != nil {
		return err
	}
	versions, _, err := s.reg.Status(sv.Model)
	if err != nil {
		return err
	}
	out := v2ModelMetadata{Name: sv.Model, Versions: make([]string, len(versions)), Platform: v2Platform}
	for i, v := range versions {
		out.Versions[i] = strconv.FormatInt(v, 10)
	}
	for _, t := range sv.inputs {
		out.Inputs = append(out.Inputs, v2TensorMeta{Name: t.name, Datatype: t.v2Type, Shape: t.v2Shape()})
	}
	for _, t := range sv.outputs {
		out.Outputs = append(out.Outputs, v2TensorMeta{Name: t.name, Datatype: t.v2Type, Shape: t.v2Shape()})
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) v2ModelReady(c echo.Context) error {
	sv, err := s.v2Servable(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v2ModelReady{Name: sv.Model, Ready: true})
}

// v2Servable resolves the :name and optional :version of a V2 route.
func (s *Server) v2Servable(c echo.Context) (*Servable, error) {
	name := c.Param("name")
	if !bundle.ValidName(name) {
		return nil, badRequest("model name %q: letters, digits and '_', starting with a letter", name)
	}
	var version int64 // 0: the default
	if strings.HasPrefix(c.Path(), routeV2Version) {
		v, err := parseVersion(c.Param("version"))
		if err != nil {
			return nil, err
		}
		version = v
	}
	return s.reg.Get(name, version)
}

// parseVersion parses a version path segment: a positive integer written
// as the repository names version directories, so "+1", "01", " 1" and ""
// are refused rather than read as version 1 or the default.
func parseVersion(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || strconv.FormatInt(n, 10) != v {
		return 0, badRequest("version %q is not a positive integer (digits, no sign or leading zero)", v)
	}
	return n, nil
}
