package worker

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/trainflow/trainflow/activities"
	"github.com/trainflow/trainflow/workflows"
)

// TestActivityWiring checks the workflow ↔ activity wiring New registers:
// every activity the workflows call (workflows.ActivityRefs) is a method
// of *activities.Activities with the name it is called by and the
// signature func(context.Context, In) (Out, error) — or
// func(context.Context, In) error — of its reference, and every exported
// method (RegisterActivity registers each under its name) is called by a
// workflow.
func TestActivityWiring(t *testing.T) {
	refs := workflows.ActivityRefs()
	if len(refs) < 15 {
		t.Fatalf("%d activity references, want every activity the workflows call", len(refs))
	}
	for _, p := range wiringProblems(reflect.TypeFor[*activities.Activities](), refs) {
		t.Error(p)
	}
}

// wiringProblems lists where the methods of acts and the references refs
// disagree.
func wiringProblems(acts reflect.Type, refs []workflows.ActivityRef) []string {
	var problems []string
	ctxType, errType := reflect.TypeFor[context.Context](), reflect.TypeFor[error]()
	called := map[string]bool{}
	for _, ref := range refs {
		name := ref.ActivityName()
		if called[name] {
			problems = append(problems, fmt.Sprintf("activity %s is referenced twice", name))
		}
		called[name] = true
		m, ok := acts.MethodByName(name)
		if !ok {
			problems = append(problems, fmt.Sprintf("the workflows call activity %s: %v has no method %s", name, acts, name))
			continue
		}
		in, out := ref.Signature()
		results := []reflect.Type{errType}
		if out != nil {
			results = []reflect.Type{out, errType}
		}
		if want := reflect.FuncOf([]reflect.Type{acts, ctxType, in}, results, false); m.Type != want {
			problems = append(problems, fmt.Sprintf("activity %s: the method is %v, the workflows call it as %v", name, m.Type, want))
		}
	}
	for i := range acts.NumMethod() {
		if m := acts.Method(i); !called[m.Name] {
			problems = append(problems, fmt.Sprintf("%v.%s is registered as activity %s, but no workflow calls it (add it to workflows' acts, or unexport it)", acts, m.Name, m.Name))
		}
	}
	return problems
}

// fakeActivities has one method of each kind of mistake.
type fakeActivities struct{}

func (*fakeActivities) Train(context.Context, workflows.EvaluateInput) (workflows.TrainResult, error) {
	return workflows.TrainResult{}, nil
}

func (*fakeActivities) Evaluate(context.Context, workflows.EvaluateInput) (workflows.TrainResult, error) {
	return workflows.TrainResult{}, nil
}

func (*fakeActivities) DeleteExport(context.Context, workflows.DeleteExportInput) (workflows.ExportResult, error) {
	return workflows.ExportResult{}, nil
}

func (*fakeActivities) Orphan(context.Context, string) error { return nil }

func (*fakeActivities) Export(context.Context, workflows.ExportInput) (workflows.ExportResult, error) {
	return workflows.ExportResult{}, nil
}

// TestActivityWiringCatchesMistakes shows the check fails on a wrong
// input, a wrong result, a result where only an error is expected, a
// missing method and a method no workflow calls, and passes a right one.
func TestActivityWiringCatchesMistakes(t *testing.T) {
	refs := []workflows.ActivityRef{
		workflows.Activity[workflows.TrainInput, workflows.TrainResult]{Name: "Train"},
		workflows.Activity[workflows.EvaluateInput, workflows.EvaluateResult]{Name: "Evaluate"},
		workflows.Activity[workflows.DeleteExportInput, workflows.NoResult]{Name: "DeleteExport"},
		workflows.Activity[workflows.PublishInput, workflows.PublishResult]{Name: "Publish"},
		workflows.Activity[workflows.ExportInput, workflows.ExportResult]{Name: "Export"},
	}
	got := wiringProblems(reflect.TypeFor[*fakeActivities](), refs)
	want := []string{"activity Train:", "activity Evaluate:", "activity DeleteExport:", "no method Publish", ".Orphan is registered"}
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %d: %q", got, len(want), want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("problem %d is %q, want it to mention %q", i, got[i], want[i])
		}
	}
}
