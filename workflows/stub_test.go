package workflows

import (
	"context"
	"reflect"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
)

// registerStubs registers, under the name of each activity reference, a
// stand-in with the reference's signature that panics: tests mock it with
// OnActivity.
func registerStubs(env *testsuite.TestWorkflowEnvironment, refs ...ActivityRef) {
	ctxType, errType := reflect.TypeFor[context.Context](), reflect.TypeFor[error]()
	for _, r := range refs {
		in, out := r.Signature()
		results := []reflect.Type{errType}
		if out != nil {
			results = []reflect.Type{out, errType}
		}
		name := r.ActivityName()
		fn := reflect.MakeFunc(reflect.FuncOf([]reflect.Type{ctxType, in}, results, false), func([]reflect.Value) []reflect.Value {
			panic("activity " + name + " is not mocked")
		})
		env.RegisterActivityWithOptions(fn.Interface(), activity.RegisterOptions{Name: name})
	}
}

// registerFunc registers fn as activity a.
func registerFunc[In, Out any](env *testsuite.TestWorkflowEnvironment, a Activity[In, Out], fn func(context.Context, In) (Out, error)) {
	env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: a.Name})
}

// testOwner is the owner the test environment's runs of job id name in
// their activities' inputs (the environment's run IDs are fixed).
func testOwner(id string) *JobOwner {
	return &JobOwner{JobID: id} // the test environment has no first run ID
}
