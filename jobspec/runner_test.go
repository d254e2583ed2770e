package jobspec

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestRunnerFieldsJSON pins the JSON of the Beam runner fields that
// DataSpec and PredictionSpec share (RunnerSpec): the same keys, in the
// same place, as when each spec spelled them out, both ways.
func TestRunnerFieldsJSON(t *testing.T) {
	f := 0.5
	var d DataSpec
	d.Train, d.Eval, d.TrainShards, d.MaxBadFraction = []string{"/t.csv"}, []string{"/e.csv"}, 4, &f
	d.Runner, d.RunnerEndpoint, d.EnvironmentType, d.EnvironmentConfig = RunnerFlink, "jm:8099", EnvExternal, "pool:5000"
	d.JobName, d.BeamArgs = "c-1", []string{"--parallelism=4"}
	var p PredictionSpec
	p.JobID, p.Model, p.InputPaths, p.OutputPath, p.DataFormat, p.MaxBadFraction = "pred_1", "census", []string{"/in/*.csv"}, "/out", FormatCSV, &f
	p.Runner, p.RunnerEndpoint, p.EnvironmentType, p.EnvironmentConfig = RunnerSpark, "spark:8099", EnvDocker, "img"
	p.JobName, p.BeamArgs, p.ShardBytes = "p-1", []string{"--beam_strict"}, 4096
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"DataSpec", &d, `{"train":["/t.csv"],"eval":["/e.csv"],"train_shards":4,"max_bad_fraction":0.5,` +
			`"runner":"flink","runner_endpoint":"jm:8099","environment_type":"EXTERNAL","environment_config":"pool:5000",` +
			`"job_name":"c-1","beam_args":["--parallelism=4"]}`},
		{"PredictionSpec", &p, `{"job_id":"pred_1","model":"census","input_paths":["/in/*.csv"],"output_path":"/out","data_format":"CSV",` +
			`"max_bad_fraction":0.5,"runner":"spark","runner_endpoint":"spark:8099","environment_type":"DOCKER",` +
			`"environment_config":"img","job_name":"p-1","beam_args":["--beam_strict"],"shard_bytes":4096}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.want {
				t.Fatalf("marshal:\n got %s\nwant %s", b, c.want)
			}
			back := reflect.New(reflect.TypeOf(c.v).Elem())
			if err := DecodeStrict([]byte(c.want), back.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Interface(), c.v) {
				t.Fatalf("round trip: got %+v, want %+v", back.Elem().Interface(), reflect.ValueOf(c.v).Elem().Interface())
			}
		})
	}
}
