package train

import (
	"fmt"
	"strings"
)

// The names of the evaluation metrics: the JSON keys of Metrics, the
// names exporters, tuning specs and the console use, and the TensorBoard
// tags of the evaluation summaries.
const (
	MetricAccuracy  = "accuracy"
	MetricAUC       = "auc"
	MetricLogLoss   = "log_loss"
	MetricPrecision = "precision"
	MetricRecall    = "recall"
	MetricRMSE      = "rmse"
	MetricMAE       = "mae"
)

// Metric goals.
const (
	Maximize = "maximize"
	Minimize = "minimize"
)

// MetricKind says which models a metric applies to.
type MetricKind int

const (
	// Classifiers: every classifier.
	Classifiers MetricKind = iota
	// Binary: binary classifiers only.
	Binary
	// Regressors: regressors only.
	Regressors
)

// MetricDef describes one evaluation metric.
type MetricDef struct {
	Name string
	// Goal is Maximize or Minimize: which way is better.
	Goal string
	Kind MetricKind
}

// MetricDefs are the evaluation metrics, in the order they are shown.
var MetricDefs = []MetricDef{
	{MetricAccuracy, Maximize, Classifiers},
	{MetricAUC, Maximize, Binary},
	{MetricLogLoss, Minimize, Classifiers},
	{MetricPrecision, Maximize, Binary},
	{MetricRecall, Maximize, Binary},
	{MetricRMSE, Minimize, Regressors},
	{MetricMAE, Minimize, Regressors},
}

// MetricDefOf returns the definition of the metric called name.
func MetricDefOf(name string) (MetricDef, bool) {
	for _, d := range MetricDefs {
		if d.Name == name {
			return d, true
		}
	}
	return MetricDef{}, false
}

// Value returns the metric called name, and false for a name that is not
// a metric.
func (m Metrics) Value(name string) (float64, bool) {
	switch name {
	case MetricAccuracy:
		return m.Accuracy, true
	case MetricAUC:
		return m.AUC, true
	case MetricLogLoss:
		return m.LogLoss, true
	case MetricPrecision:
		return m.Precision, true
	case MetricRecall:
		return m.Recall, true
	case MetricRMSE:
		return m.RMSE, true
	case MetricMAE:
		return m.MAE, true
	}
	return 0, false
}

// Kind tells, from the values alone, the kind of model m evaluated: a
// regressor has an error (or neither accuracy nor log loss), a binary
// classifier an AUC, precision or recall; anything else is a classifier
// of more classes.
func (m Metrics) Kind() MetricKind {
	switch {
	case m.RMSE != 0 || m.MAE != 0 || (m.Accuracy == 0 && m.LogLoss == 0):
		return Regressors
	case m.AUC != 0 || m.Precision != 0 || m.Recall != 0:
		return Binary
	}
	return Classifiers
}

// Applies reports whether metric d applies to a model of kind k.
func (d MetricDef) Applies(k MetricKind) bool {
	switch d.Kind {
	case Regressors:
		return k == Regressors
	case Binary:
		return k == Binary
	}
	return k != Regressors
}

// Summary is the metrics that apply to m's kind of model, as
// "accuracy 0.8602, auc 0.8618, log_loss 0.3120, precision …": a
// multiclass classifier shows no AUC, a regressor no accuracy.
func (m Metrics) Summary() string {
	k := m.Kind()
	var parts []string
	for _, d := range MetricDefs {
		if d.Applies(k) {
			v, _ := m.Value(d.Name)
			parts = append(parts, fmt.Sprintf("%s %.4f", d.Name, v))
		}
	}
	return strings.Join(parts, ", ")
}
