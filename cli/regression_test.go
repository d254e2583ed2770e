package cli

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/preprocess"
)

// TestRegressionJobEndToEnd trains a linear regressor on census-like rows
// (the label: education_num, which the education column determines),
// exports the best model by RMSE, publishes it and asks the server for
// values.
func TestRegressionJobEndToEnd(t *testing.T) {
	st := testStack(t, t.TempDir())
	s := preprocess.CensusSchema()
	s.Label, s.LabelKind, s.LabelVocab, s.LabelTrimSuffix = "education_num", preprocess.LabelRegression, nil, ""
	schema, _ := json.Marshal(s)
	input := fmt.Sprintf(`{"job_id":"years","preset":"census","model_name":"years","data":{"generated_rows":6000,"schema":%s},
		"model":{"learning_rate":0.1},"train":{"max_steps":3000},"eval_spec":{"throttle_secs":0}}`, schema)
	res, err := waitJob(t, startUIStyle(t, st.Client, "years", input))
	if err != nil {
		t.Fatal(err)
	}
	sd := labelStdDev(t, filepath.Join(res.JobDir, "raw", "eval.csv"), 4)
	t.Logf("eval RMSE %.3f, MAE %.3f; predicting the mean: %.3f; published %s version %d", res.Metrics.RMSE, res.Metrics.MAE, sd, res.Model, res.Version)
	if res.Metrics.RMSE <= 0 || res.Metrics.RMSE >= sd/2 {
		t.Fatalf("RMSE %.3f, want under half of predicting the mean (%.3f)", res.Metrics.RMSE, sd)
	}
	code, b := postJSON(t, fmt.Sprintf("http://%s/v1/models/years:predict", st.HTTPAddr),
		`{"instances":[{"age":39,"workclass":"State-gov","education":"Bachelors","hours_per_week":40,"marital_status":"Never-married","occupation":"Adm-clerical","relationship":"Not-in-family","race":"White","gender":"Male","capital_gain":2174,"capital_loss":0,"native_country":"United-States","income_bracket":"<=50K","fnlwgt":77516}]}`)
	var out struct {
		Predictions []struct {
			Value *float64 `json:"value"`
		} `json:"predictions"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &out) != nil || len(out.Predictions) != 1 || out.Predictions[0].Value == nil ||
		math.IsNaN(*out.Predictions[0].Value) {
		t.Fatalf("predict: %d %s, want one value", code, b)
	}
	t.Logf("predicted education_num for a Bachelors (13): %.2f", *out.Predictions[0].Value)
}

// labelStdDev returns the standard deviation of column col of a CSV file:
// the RMSE of predicting the mean.
func labelStdDev(t *testing.T, path string, col int) float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var sum, sq, n float64
	for _, row := range rows {
		if len(row) <= col {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(row[col]), 64)
		if err != nil {
			continue
		}
		sum, sq, n = sum+v, sq+v*v, n+1
	}
	if n < 100 {
		t.Fatalf("%s: only %v numeric values in column %d", path, n, col)
	}
	m := sum / n
	return math.Sqrt(sq/n - m*m)
}
