package train

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestMetricDefsCoverMetrics ties the names to the struct: every metric
// field's JSON key has a definition and Value reads that very field, so a
// metric added to Metrics without a name (or a name reading the wrong
// field) fails here.
func TestMetricDefsCoverMetrics(t *testing.T) {
	typ := reflect.TypeOf(Metrics{})
	seen := 0
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.Float64 {
			continue // examples: a count, not a metric
		}
		seen++
		if _, ok := MetricDefOf(name); !ok {
			t.Errorf("field %s (%q) has no MetricDef", f.Name, name)
		}
		var m Metrics
		reflect.ValueOf(&m).Elem().Field(i).SetFloat(0.25)
		if v, ok := m.Value(name); !ok || v != 0.25 {
			t.Errorf("Value(%q) = %v, %v; want the field %s", name, v, ok, f.Name)
		}
	}
	if seen != len(MetricDefs) {
		t.Errorf("%d metric fields, %d MetricDefs", seen, len(MetricDefs))
	}
	if _, ok := (Metrics{}).Value("examples"); ok {
		t.Error("examples is a count, not a metric")
	}
}

func TestMetricsSummary(t *testing.T) {
	for _, tc := range []struct {
		m    Metrics
		want string
	}{
		{Metrics{Accuracy: 0.86, LogLoss: 0.31, AUC: 0.9, Precision: 0.7, Recall: 0.6}, "accuracy 0.8600, auc 0.9000, log_loss 0.3100, precision 0.7000, recall 0.6000"},
		{Metrics{Accuracy: 0.87, LogLoss: 0.4}, "accuracy 0.8700, log_loss 0.4000"}, // multiclass: no AUC 0.0000
		{Metrics{RMSE: 2, MAE: 1.5}, "rmse 2.0000, mae 1.5000"},
		{Metrics{}, "rmse 0.0000, mae 0.0000"}, // a perfect regressor
	} {
		if got := tc.m.Summary(); got != tc.want {
			b, _ := json.Marshal(tc.m)
			t.Errorf("Summary of %s = %q, want %q", b, got, tc.want)
		}
	}
}
