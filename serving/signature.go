package serving

import (
	"strconv"

	"github.com/trainflow/trainflow/preprocess"
)

// tensor describes one input or output of a servable in the terms of both
// protocols: its name, its V2 datatype, its TF Serving dtype and its
// elements per row.
type tensor struct {
	name   string
	v2Type string // FP64, INT64 or BYTES
	tfType string // DT_DOUBLE, DT_INT64 or DT_STRING
	// width is the number of elements per row: 0 for one value (shape
	// [-1]), else the length of a row's vector (shape [-1, width]).
	width int
}

// v2Shape is the shape of t in V2 metadata, -1 rows.
func (t tensor) v2Shape() []int64 {
	if t.width == 0 {
		return []int64{-1}
	}
	return []int64{-1, int64(t.width)}
}

// info is t as a TF Serving TensorInfo.
func (t tensor) info() tensorInfo {
	dims := []tensorDim{{Size: "-1"}}
	if t.width > 0 {
		dims = append(dims, tensorDim{Size: strconv.Itoa(t.width)})
	}
	return tensorInfo{Dtype: t.tfType, TensorShape: tensorShape{Dim: dims}, Name: t.name}
}

// inputTensors are the raw inputs of the Transform's signature.
func inputTensors(t *preprocess.Transform) []tensor {
	var out []tensor
	for _, in := range t.Signature() {
		switch in.Type {
		case preprocess.TypeNumber:
			out = append(out, tensor{in.Name, "FP64", "DT_DOUBLE", 0})
		case preprocess.TypeFloatVector:
			out = append(out, tensor{in.Name, "FP64", "DT_DOUBLE", in.Length})
		default:
			out = append(out, tensor{in.Name, "BYTES", "DT_STRING", 0})
		}
	}
	return out
}

// outputTensors are the outputs of a model of k outputs and the given
// classes (none: a regressor).
func outputTensors(classes, k int) []tensor {
	if classes == 0 {
		return []tensor{{outValue, "FP64", "DT_DOUBLE", 0}}
	}
	return []tensor{
		{outClass, "BYTES", "DT_STRING", 0},
		{outClassIndex, "INT64", "DT_INT64", 0},
		{outProbabilities, "FP64", "DT_DOUBLE", classes},
		{outLogits, "FP64", "DT_DOUBLE", k},
	}
}

// signatureDefs are the servable's signatures as TF Serving's metadata
// lists them: serving_default (predict) and classification (a
// classifier: classes and scores of every class) or regression (a
// regressor: outputs), over the same raw inputs.
func (sv *Servable) signatureDefs() map[string]signatureDef {
	infos := func(ts []tensor) map[string]tensorInfo {
		m := make(map[string]tensorInfo, len(ts))
		for _, t := range ts {
			m[t.name] = t.info()
		}
		return m
	}
	in := infos(sv.inputs)
	defs := map[string]signatureDef{
		sigDefault: {Inputs: in, Outputs: infos(sv.outputs), MethodName: methodPredict, Defaults: map[string]any{}},
	}
	if classes := sv.Bundle.Model.NumClasses(); classes > 0 {
		defs[sigClassification] = signatureDef{Inputs: in, MethodName: methodClassify, Defaults: map[string]any{},
			Outputs: infos([]tensor{{"classes", "BYTES", "DT_STRING", classes}, {"scores", "FP64", "DT_DOUBLE", classes}})}
	} else {
		defs[sigRegression] = signatureDef{Inputs: in, MethodName: methodRegress, Defaults: map[string]any{},
			Outputs: infos([]tensor{{"outputs", "FP64", "DT_DOUBLE", 0}})}
	}
	return defs
}
