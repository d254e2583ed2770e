// Package resultsig makes activity results that only trainflow's workers
// can write. Temporal lets any client of a namespace complete, fail or
// cancel any started activity by its ID (RespondActivityTaskCompletedById
// and friends); a workflow that used such a result would take a decision
// an attacker typed. With the interceptors of this package installed on
// every worker:
//
//   - the workflow asks for a signed result in the activity's header
//     (a sequence number unique in the run, HeaderKey);
//   - the worker that runs the activity returns, in place of its result,
//     a Result envelope: the result's payload with an HMAC-SHA256 under the
//     operator's key (Keyring) over the namespace, workflow ID, run ID,
//     sequence number, activity ID, attempt, activity type and payload; an
//     application failure carries the same MAC over its type, message and
//     retryability as its one detail;
//   - the workflow checks the MAC before it uses the result. A result or
//     application failure without a valid MAC is refused: never decoded
//     into the caller's value, recorded (a SideEffect marker in the
//     history naming the activity and the reason, and a warning in the
//     worker's log), and the activity is scheduled again, up to
//     MaxRefused times, after which the call fails with ErrTypeRefused.
//
// The verdict is recorded with workflow.SideEffect, so a history replays
// without the key (trainflow replay, a user's machine, the recorded test
// histories) and after a key rotation. Histories from before signing (no
// version marker ChangeID) replay unsigned, as they ran.
//
// What this does not stop: a client that polls the task queues can run an
// activity itself (it then holds no key, so its result is refused) or
// answer workflow tasks as if it were a worker (then it decides what the
// workflow does, verdicts included): only server authorization (workers
// apart from users) stops that. A forged cancel or timeout is not signed
// (the server makes timeouts; a cancel is answered to the workflow's own
// request): it fails the step, a denial, never a forged decision.
package resultsig

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

const (
	// HeaderKey is the activity header in which a workflow asks for a
	// signed result: a JSON request {"v": 1, "seq": N}.
	HeaderKey = "trainflow-signed-result"
	// ChangeID is the workflow.GetVersion change ID under which a run
	// signs its activities' results (version 1); histories without its
	// marker ran unsigned and replay so.
	ChangeID = "signed-activity-results"
	// MaxRefused is how many refused results one activity call takes
	// before it fails with ErrTypeRefused.
	MaxRefused = 5
	// ErrTypeRefused is the application error type of a call whose
	// results were refused MaxRefused times in a row.
	ErrTypeRefused = "UnverifiedActivityResult"
	// Version is the envelope's version.
	Version = 1
)

// request is the header's value.
type request struct {
	V   int   `json:"v"`
	Seq int64 `json:"seq"`
}

// Result is what a signing worker completes an activity with in place of
// its result: the result's payload (Encoding, the payload's "encoding"
// metadata, and Data; both empty for an activity that returns only an
// error) and its MAC.
type Result struct {
	Signed     int    `json:"trainflow_signed_result"`
	KeyID      string `json:"key_id"`
	ActivityID string `json:"activity_id"`
	Attempt    int32  `json:"attempt"`
	Encoding   string `json:"encoding,omitempty"`
	Data       []byte `json:"data,omitempty"`
	MAC        []byte `json:"mac"`
}

// Failure is the one detail of a signed application failure.
type Failure struct {
	Signed     int    `json:"trainflow_signed_failure"`
	KeyID      string `json:"key_id"`
	ActivityID string `json:"activity_id"`
	Attempt    int32  `json:"attempt"`
	MAC        []byte `json:"mac"`
}

// binding is what a result is signed for.
type binding struct {
	namespace, workflowID, runID, activityType string
	seq                                        int64
	// originalRunID is, on the workflow's side, the run a reset run was
	// reset from (workflow.Info.OriginalRunID): a result that run's
	// worker signed for the same call is the same call's (the reset run
	// re-runs the workflow task that took it), so it is accepted too.
	originalRunID string
}

// runs returns the bindings a workflow accepts a result under: its own
// run's and, after a reset, the original run's.
func (b binding) runs() []binding {
	out := []binding{b}
	if b.originalRunID != "" && b.originalRunID != b.runID {
		o := b
		o.runID = o.originalRunID
		out = append(out, o)
	}
	return out
}

// message is the byte string a MAC covers: a domain, then each field
// length-prefixed.
func message(kind string, b binding, activityID string, attempt int32, fields ...[]byte) []byte {
	var buf bytes.Buffer
	put := func(p []byte) {
		buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(p))))
		buf.Write(p)
	}
	put([]byte("trainflow/activity-" + kind + "/v1"))
	for _, s := range []string{b.namespace, b.workflowID, b.runID, strconv.FormatInt(b.seq, 10), activityID, strconv.FormatInt(int64(attempt), 10), b.activityType} {
		put([]byte(s))
	}
	for _, f := range fields {
		put(f)
	}
	return buf.Bytes()
}

func failureFields(msg, errType string, nonRetryable bool) [][]byte {
	return [][]byte{[]byte(msg), []byte(errType), []byte(strconv.FormatBool(nonRetryable))}
}

// Interceptor signs activity results on the activity side and checks them
// on the workflow side. Install the same on every worker of the task
// queues (worker.Options.Interceptors) and on replayers (with nil keys:
// a replay reads the recorded verdicts).
type Interceptor struct {
	interceptor.WorkerInterceptorBase
	keys *Keyring
}

// New returns the interceptor for keys; nil keys can only replay (a run
// that is not replaying refuses every result, and activities are not
// signed).
func New(keys *Keyring) *Interceptor { return &Interceptor{keys: keys} }

// InterceptActivity signs the results of activities whose header asks.
func (i *Interceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &activityInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, keys: i.keys}
}

// InterceptWorkflow checks the results of the activities a workflow calls.
func (i *Interceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &workflowInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, keys: i.keys}
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	keys *Keyring
}

var dc = converter.GetDefaultDataConverter()

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	p := interceptor.Header(ctx)[HeaderKey]
	if p == nil || a.keys == nil {
		return a.Next.ExecuteActivity(ctx, in)
	}
	var req request
	if err := dc.FromPayload(p, &req); err != nil || req.V != Version {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("resultsig: header %s: unsupported request", HeaderKey), ErrTypeRefused, err)
	}
	res, err := a.Next.ExecuteActivity(ctx, in)
	info := activity.GetInfo(ctx)
	b := binding{namespace: info.WorkflowNamespace, workflowID: info.WorkflowExecution.ID, runID: info.WorkflowExecution.RunID,
		activityType: info.ActivityType.Name, seq: req.Seq}
	if err != nil {
		return nil, a.signFailure(b, info.ActivityID, info.Attempt, err)
	}
	env := Result{Signed: Version, ActivityID: info.ActivityID, Attempt: info.Attempt}
	if res != nil {
		pl, err := dc.ToPayload(res)
		if err != nil {
			return nil, err
		}
		env.Encoding, env.Data = string(pl.GetMetadata()[converter.MetadataEncoding]), pl.GetData()
	}
	env.KeyID, env.MAC = a.keys.mac(message("result", b, env.ActivityID, env.Attempt, []byte(env.Encoding), env.Data))
	return env, nil
}

// signFailure returns err as the application error the SDK would send
// for it (same message, type, retryability and cause), with a Failure as
// its one detail. Cancellations pass as they are.
func (a *activityInbound) signFailure(b binding, activityID string, attempt int32, err error) error {
	if temporal.IsCanceledError(err) || errors.Is(err, context.Canceled) {
		return err
	}
	msg, errType, nonRetryable, cause := err.Error(), errTypeOf(err), false, errors.Unwrap(err)
	var opts temporal.ApplicationErrorOptions
	if ae, ok := err.(*temporal.ApplicationError); ok {
		msg, errType, nonRetryable, cause = ae.Message(), ae.Type(), ae.NonRetryable(), ae.Unwrap()
		opts.NextRetryDelay, opts.Category = ae.NextRetryDelay(), ae.Category()
	}
	f := Failure{Signed: Version, ActivityID: activityID, Attempt: attempt}
	f.KeyID, f.MAC = a.keys.mac(message("failure", b, activityID, attempt, failureFields(msg, errType, nonRetryable)...))
	opts.NonRetryable, opts.Cause, opts.Details = nonRetryable, cause, []any{f}
	return temporal.NewApplicationErrorWithOptions(msg, errType, opts)
}

// errTypeOf is the type the SDK gives an error that is not an
// ApplicationError: its Go type's name, pointers dereferenced.
func errTypeOf(err error) string {
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() == "errorString" && t.PkgPath() == "errors" {
		return ""
	}
	return t.Name()
}

type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	keys *Keyring
}

func (w *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return w.Next.Init(&workflowOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, keys: w.keys})
}

// workflowOutbound is one workflow execution's: seq numbers its signed
// calls in the order the workflow makes them (deterministic, so a replay
// numbers them alike).
type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	keys    *Keyring
	decided bool
	signed  bool
	seq     int64
}

type refusedKey struct{}

func (o *workflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if !o.decided {
		o.decided = true
		o.signed = workflow.GetVersion(ctx, ChangeID, workflow.DefaultVersion, 1) == 1
	}
	if !o.signed {
		return o.Next.ExecuteActivity(ctx, activityType, args...)
	}
	o.seq++
	seq := o.seq
	hp, err := dc.ToPayload(request{V: Version, Seq: seq})
	if err != nil {
		panic(err)
	}
	interceptor.WorkflowHeader(ctx)[HeaderKey] = hp
	inner := o.Next.ExecuteActivity(ctx, activityType, args...)
	outer, settable := workflow.NewFuture(ctx)
	refused, _ := ctx.Value(refusedKey{}).(int)
	workflow.Go(ctx, func(gctx workflow.Context) {
		info := workflow.GetInfo(gctx)
		b := binding{namespace: info.Namespace, workflowID: info.WorkflowExecution.ID, runID: info.WorkflowExecution.RunID,
			originalRunID: info.OriginalRunID, activityType: activityType, seq: seq}
		verdictOf := func(check func() string) string {
			var v string
			if workflow.SideEffect(gctx, func(workflow.Context) any { return check() }).Get(&v) != nil {
				return "the recorded verdict does not decode"
			}
			return v
		}
		var verdict string
		var env Result
		if err := inner.Get(gctx, nil); err != nil { // the activity failed: no decoding
			if !needsSignature(err) {
				settable.Set(nil, err)
				return
			}
			if verdict = verdictOf(func() string { return o.checkFailure(b, err) }); verdict == "" {
				settable.Set(nil, err)
				return
			}
		} else if derr := inner.Get(gctx, &env); derr != nil {
			verdict = verdictOf(func() string { return "the result is not a signed result (it does not decode as one)" })
		} else if verdict = verdictOf(func() string { return o.checkResult(b, env) }); verdict == "" {
			if p := env.payloads(); p != nil {
				settable.Set(p, nil)
			} else {
				settable.Set(nil, nil) // not a typed nil: the caller's Get decodes nothing
			}
			return
		}
		workflow.GetLogger(gctx).Warn("activity result refused", "activity_type", activityType, "seq", seq, "reason", verdict, "refused", refused+1)
		if refused+1 >= MaxRefused {
			settable.Set(nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("activity %s: %d results in a row refused, the last: %s", activityType, refused+1, verdict), ErrTypeRefused, nil))
			return
		}
		settable.Chain(workflow.ExecuteActivity(workflow.WithValue(ctx, refusedKey{}, refused+1), activityType, args...))
	})
	return outer
}

// needsSignature reports whether err is an application failure, which a
// worker signs; timeouts, cancellations and terminations are the
// server's or the workflow's own.
func needsSignature(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae)
}

// checkResult returns why env is not a genuine result of b's call, or "".
func (o *workflowOutbound) checkResult(b binding, env Result) string {
	if env.Signed != Version {
		return "unsigned result (no trainflow signature)"
	}
	return o.checkMAC("result", b, env.KeyID, env.ActivityID, env.Attempt, env.MAC, []byte(env.Encoding), env.Data)
}

// checkFailure returns why err is not a genuine failure of b's call, or "".
func (o *workflowOutbound) checkFailure(b binding, err error) string {
	var ae *temporal.ApplicationError
	errors.As(err, &ae)
	var f Failure
	if !ae.HasDetails() || ae.Details(&f) != nil || f.Signed != Version {
		return "unsigned failure (no trainflow signature)"
	}
	return o.checkMAC("failure", b, f.KeyID, f.ActivityID, f.Attempt, f.MAC, failureFields(ae.Message(), ae.Type(), ae.NonRetryable())...)
}

// checkMAC returns why mac is not the MAC of a kind ("result" or
// "failure") of b's call, under any run it accepts (binding.runs), or "".
func (o *workflowOutbound) checkMAC(kind string, b binding, keyID, activityID string, attempt int32, mac []byte, fields ...[]byte) string {
	if o.keys == nil {
		return "this worker holds no result key"
	}
	var err error
	for _, r := range b.runs() {
		if err = o.keys.check(keyID, message(kind, r, activityID, attempt, fields...), mac); err == nil {
			return ""
		}
	}
	return fmt.Sprintf("%s of activity %s attempt %d: %v", kind, activityID, attempt, err)
}

// Unwrap returns the result payloads inside a signed Result, for readers
// of a history (the CLI, the console) that show what an activity
// returned; p itself when it is not a signed result. It does not check
// the MAC: a reader holds no key, and what a workflow used is what it
// accepted (the verdict marker after the completion).
func Unwrap(p *commonpb.Payloads) *commonpb.Payloads {
	if len(p.GetPayloads()) != 1 {
		return p
	}
	var env Result
	if dc.FromPayload(p.Payloads[0], &env) != nil || env.Signed != Version {
		return p
	}
	return env.payloads()
}

// payloads is the result's payload as its worker encoded it; nil for an
// activity that returned only an error.
func (r Result) payloads() *commonpb.Payloads {
	if r.Encoding == "" {
		return nil
	}
	return &commonpb.Payloads{Payloads: []*commonpb.Payload{{
		Metadata: map[string][]byte{converter.MetadataEncoding: []byte(r.Encoding)}, Data: r.Data}}}
}
