package serving

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/train"
)

// The TF Serving REST API beyond :predict: the model list (an extension),
// model status and metadata, :classify and :regress.

func (s *Server) listModels(c echo.Context) error {
	out := modelList{Models: []modelEntry{}}
	for _, name := range s.reg.Models() {
		versions, def, err := s.reg.Status(name)
		if err != nil {
			continue // unloaded between the two calls
		}
		out.Models = append(out.Models, modelEntry{Name: name, Versions: versions, Default: def})
	}
	return c.JSON(http.StatusOK, out)
}

// v1Selection parses the :name and the optional :version or :label of a
// GET /v1/models route into a target (verb empty).
func v1Selection(c echo.Context) (target, error) {
	t := target{model: c.Param("name")}
	if !bundle.ValidName(t.model) {
		return target{}, badRequest("model name %q: letters, digits and '_', starting with a letter", t.model)
	}
	if v := c.Param("version"); v != "" || c.Path() == routeV1Version || c.Path() == routeV1Version+suffixMetadata {
		n, err := parseVersion(v)
		if err != nil {
			return target{}, err
		}
		t.version = n
	}
	if l := c.Param("label"); l != "" || c.Path() == routeV1Label || c.Path() == routeV1Label+suffixMetadata {
		if !bundle.ValidName(l) {
			return target{}, badRequest("label %q: letters, digits and '_', starting with a letter", l)
		}
		t.label = l
	}
	return t, nil
}

// modelStatus answers TF Serving's GetModelStatusResponse: every loaded
// version of the model, or the one version a /versions/N or /labels/L
// path names.
func (s *Server) modelStatus(c echo.Context) error {
	t, err := v1Selection(c)
	if err != nil {
		return err
	}
	var versions []int64
	if t.version != 0 || t.label != "" {
		sv, err := s.servable(t)
		if err != nil {
			return err
		}
		versions = []int64{sv.Version}
	} else if versions, _, err = s.reg.Status(t.model); err != nil {
		return err
	}
	out := modelStatus{ModelVersionStatus: make([]versionStatus, 0, len(versions))}
	for _, v := range versions {
		out.ModelVersionStatus = append(out.ModelVersionStatus, versionStatus{
			Version: strconv.FormatInt(v, 10), State: stateAvailable, Status: statusProto{ErrorCode: codeOK},
		})
	}
	return c.JSON(http.StatusOK, out)
}

// modelMetadata answers TF Serving's GetModelMetadataResponse for the
// default version, or the one a /versions/N or /labels/L path names.
func (s *Server) modelMetadata(c echo.Context) error {
	t, err := v1Selection(c)
	if err != nil {
		return err
	}
	sv, err := s.servable(t)
	if err != nil {
		return err
	}
	meta := trainflowMeta{
		Inputs:        sv.Transform.Signature(),
		GlobalStep:    sv.Bundle.Meta.Step,
		Metrics:       sv.Bundle.Meta.Metrics,
		JobID:         sv.Bundle.Meta.JobID,
		TransformHash: sv.Transform.Hash,
	}
	if sv.regressor() {
		meta.ProblemType, meta.Label = problemRegression, sv.Transform.Schema.Label
	} else {
		meta.Classes = sv.Transform.LabelVocab
	}
	return c.JSON(http.StatusOK, modelMetadata{
		ModelSpec: modelSpec{Name: sv.Model, Version: sv.versionText},
		Metadata:  metadataMap{SignatureDef: signatureDefMap{SignatureDef: sv.signatureDefs()}, Trainflow: meta},
	})
}

// classifyOrRegress answers the :classify or :regress body in sc.body
// into sc.out: {"results": [[[class, probability], …], …]} for a
// classifier, {"results": [value, …]} for a regressor. It returns the
// number of examples answered.
func (s *Server) classifyOrRegress(sc *scratch, sv *Servable, verb string) (int, error) {
	switch {
	case verb == verbClassify && sv.regressor():
		return 0, badRequest("model %q is a regressor: use :regress or :predict", sv.Model)
	case verb == verbRegress && !sv.regressor():
		return 0, badRequest("model %q is a classifier: use :classify or :predict", sv.Model)
	}
	lim := sv.limits(s.opts.MaxInstances)
	if err := boundPredict(sc.body, lim); err != nil {
		return 0, err
	}
	var req exampleRequest
	if err := strictDecode(sc.body, &req, `{"examples": [{feature: value, …}, …]}`); err != nil {
		return 0, err
	}
	if err := checkSignature(verb, req.SignatureName); err != nil {
		return 0, err
	}
	if len(req.Examples) == 0 {
		return 0, badRequest("no examples: send {\"examples\": [{feature: value, …}]}")
	}
	if len(req.Examples) > s.opts.MaxInstances {
		return 0, tooManyRows(len(req.Examples), keyExamples, s.opts.MaxInstances)
	}
	rows := make([]rawObject, len(req.Examples))
	for i, raw := range req.Examples {
		if err := json.Unmarshal(raw, &rows[i]); err != nil || rows[i] == nil {
			return 0, badRequest("examples[%d] is not a JSON object of features", i)
		}
		for k, v := range req.Context {
			if _, ok := rows[i][k]; ok {
				return 0, badRequest("examples[%d].%s: also in context (a feature goes in one or the other)", i, clipKey([]byte(k)))
			}
			rows[i][k] = v
		}
	}
	sc.rows, sc.what = rows, keyExamples
	n := len(rows)
	if err := sv.predict(sc, n); err != nil {
		return 0, err
	}
	b := append(sc.out[:0], wireResults...)
	classes := sv.Bundle.Model.NumClasses()
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		if classes == 0 {
			b = appendFloat(b, sc.logits[i*sv.Bundle.Model.Outputs()])
			continue
		}
		b = append(b, '[')
		for j, p := range sc.probs[i*classes : (i+1)*classes] {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = append(b, sv.classJSON[j]...)
			b = append(b, ',')
			b = appendFloat(b, p)
			b = append(b, ']')
		}
		b = append(b, ']')
	}
	sc.out = append(b, "]}\n"...)
	return n, nil
}

// appendOutputs appends the columnar answer for n instances of sc after
// predict: {"outputs": {name: [one value or array per instance], …}},
// the names of sv.outputs.
func (sv *Servable) appendOutputs(b []byte, sc *scratch, n int) []byte {
	b = append(b, wireOutputs...)
	k, classes := sv.Bundle.Model.Outputs(), sv.Bundle.Model.NumClasses()
	for o, t := range sv.outputs {
		if o > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, t.name)
		b = append(b, ":["...)
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			switch t.name {
			case outValue:
				b = appendFloat(b, sc.logits[i*k])
			case outClass:
				b = append(b, sv.classJSON[train.Argmax(sc.probs[i*classes:(i+1)*classes])]...)
			case outClassIndex:
				b = strconv.AppendInt(b, int64(train.Argmax(sc.probs[i*classes:(i+1)*classes])), 10)
			case outProbabilities:
				b = appendFloats(b, sc.probs[i*classes:(i+1)*classes])
			case outLogits:
				b = appendFloats(b, sc.logits[i*k:(i+1)*k])
			}
		}
		b = append(b, ']')
	}
	return append(b, "}}\n"...)
}

// checkSignature refuses a signature_name that verb does not answer.
func checkSignature(verb, name string) error {
	if slices.Contains(signatures[verb], name) {
		return nil
	}
	return badRequest("signature_name %q: this model answers :%s with %q", name, verb, signatures[verb][1:])
}

// errNotSingle is the 400 of a request that omits the input name for a
// model of several inputs.
func (sv *Servable) errNotSingle(field string) error {
	return badRequest("%s: this model has %d inputs, so each must be named: send {%q: value, …}", field, len(sv.inputs), sv.inputs[0].name)
}
