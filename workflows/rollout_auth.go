package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/trainflow/trainflow/internal/opkey"
)

// rolloutAuthChange marks runs whose start and signals are authorized
// (the operator's say or the owner chain; runs recorded before it had
// neither).
const rolloutAuthChange = "rollout-operator-say"

// ErrTypeNotAuthorized is the error type of a rollout refused because
// neither the operator's say nor the model's owner chain backs it.
const ErrTypeNotAuthorized = "NotAuthorized"

// Operator actions, in OperatorSay.Action.
const (
	SayStart   = "start"
	SayApprove = "approve"
	SayAbort   = "abort"
	SayPause   = "pause"
	SayResume  = "resume"
)

// OperatorSay is the operator's signed say on a rollout: Action on the
// rollout WorkflowID of Model (a start: of its version Candidate), until
// Expires (unix seconds).
// A start (SayStart) binds Input, the SHA-256 of the start input
// (RolloutInputHash), and is good for a run that the Temporal server
// started before Expires; a signal binds FirstRunID (the rollout's run
// chain, kept by resets) and Reason, is good until Expires by the
// workflow's clock, and once per Nonce. Sig is the Ed25519 signature by
// the operator key KeyID over Message.
type OperatorSay struct {
	KeyID      string `json:"key_id"`
	Action     string `json:"action"`
	Model      string `json:"model"`
	Candidate  int64  `json:"candidate"`
	WorkflowID string `json:"workflow_id"`
	FirstRunID string `json:"first_run_id,omitempty"`
	Input      string `json:"input,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Nonce      string `json:"nonce"`
	Expires    int64  `json:"expires"`
	Sig        []byte `json:"sig,omitempty"`
}

// Message is what Sig signs: a domain line, then the say without Sig as
// JSON.
func (s OperatorSay) Message() []byte {
	s.Sig = nil
	b, _ := json.Marshal(s)
	return append([]byte("trainflow rollout operator say v1\n"), b...)
}

// Sign sets s.KeyID and s.Sig with signer.
func (s *OperatorSay) Sign(signer opkey.Signer) {
	s.KeyID = signer.ID
	s.Sig = signer.Sign(s.Message())
}

// check verifies s under keys for action on the rollout id of model.
func (s *OperatorSay) check(keys []opkey.Public, action, model, id string) error {
	if s == nil {
		return fmt.Errorf("no operator say")
	}
	if err := opkey.Verify(keys, s.KeyID, s.Message(), s.Sig); err != nil {
		return err
	}
	switch {
	case s.Action != action:
		return fmt.Errorf("the say is for %q, not %q", s.Action, action)
	case s.Model != model:
		return fmt.Errorf("the say is for model %q, not %q", s.Model, model)
	case s.WorkflowID != id:
		return fmt.Errorf("the say is for workflow %q, not %q", s.WorkflowID, id)
	}
	return nil
}

// CheckStart verifies s as the operator's say to start the rollout in as
// workflow id, for a run the server started at started.
func (s *OperatorSay) CheckStart(keys []opkey.Public, in RolloutInput, id string, started time.Time) error {
	if err := s.check(keys, SayStart, in.Model, id); err != nil {
		return err
	}
	if s.Candidate != in.Candidate {
		return fmt.Errorf("the say is for version %d, not %d", s.Candidate, in.Candidate)
	}
	if h := RolloutInputHash(in); s.Input != h {
		return fmt.Errorf("the say is for another input (steps, holds, gates or approval differ)")
	}
	if started.Unix() > s.Expires {
		return fmt.Errorf("the say expired at %s, before the run started at %s", time.Unix(s.Expires, 0).UTC().Format(time.RFC3339), started.UTC().Format(time.RFC3339))
	}
	return nil
}

// RolloutInputHash is the SHA-256 (hex) of in without its Operator: what a
// start's say binds.
func RolloutInputHash(in RolloutInput) string {
	in.Operator = nil
	b, _ := json.Marshal(in)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// RolloutSignal is the payload of the approve, abort, pause and resume
// signals of a rollout run authorized by the operator's say: the
// operator's say on the action (Reason, for abort, is in the say).
type RolloutSignal struct {
	Operator *OperatorSay `json:"operator,omitempty"`
}

// Principal kinds, in RolloutPrincipal.Kind.
const (
	PrincipalOperator = "operator"
	PrincipalJob      = "job"
)

// RolloutPrincipal is who a rollout or one of its actions is verified to
// come from: an operator key (ID its key ID) or the job that published the
// candidate and started the rollout as its child (ID its workflow ID, the
// parent the Temporal server recorded).
type RolloutPrincipal struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// String is "operator:ID" or "job:ID".
func (p RolloutPrincipal) String() string { return p.Kind + ":" + p.ID }

// maxRefused bounds RolloutStatus.Refused.
const maxRefused = 20

// signal applies one signal of name with its raw payload under the
// authorized rules: only a say by a key of the run (r.keys) for this
// action, model, candidate, workflow and run chain, not expired and not
// seen before, takes effect; anything else is refused and recorded in
// the status (Refused) and the log.
func (r *rolloutRun) signal(ctx workflow.Context, name string, raw json.RawMessage) {
	refuse := func(why string) {
		line := fmt.Sprintf("%s %s: %s", workflow.Now(ctx).UTC().Format(time.RFC3339), name, why)
		r.st.Refused = append(r.st.Refused, cutText(line, 300))
		if len(r.st.Refused) > maxRefused {
			r.st.Refused = r.st.Refused[len(r.st.Refused)-maxRefused:]
		}
		workflow.GetLogger(ctx).Warn("rollout_signal_refused", "signal", name, "reason", why)
	}
	var sg RolloutSignal
	//workflowcheck:ignore json.Unmarshal of the signal's bytes into a struct is deterministic
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &sg) != nil || sg.Operator == nil {
		refuse("not signed by the operator (trainflow models rollout-signal --operator-key)")
		return
	}
	say := sg.Operator
	info := workflow.GetInfo(ctx)
	//workflowcheck:ignore Ed25519 verification of bytes in history is a pure function
	if err := say.check(r.keys, name, r.in.Model, r.id); err != nil {
		refuse(err.Error())
		return
	}
	switch {
	case say.FirstRunID != info.FirstRunID:
		refuse(fmt.Sprintf("the say is for run chain %q, not this rollout's %q", say.FirstRunID, info.FirstRunID))
		return
	case workflow.Now(ctx).Unix() > say.Expires:
		refuse("the say expired at " + time.Unix(say.Expires, 0).UTC().Format(time.RFC3339))
		return
	case say.Nonce == "" || r.nonces[say.Nonce]:
		refuse("the say was used already (its nonce)")
		return
	}
	if r.nonces == nil {
		r.nonces = map[string]bool{}
	}
	r.nonces[say.Nonce] = true
	by := RolloutPrincipal{Kind: PrincipalOperator, ID: say.KeyID}
	switch name {
	case RolloutApproveSignal:
		r.approved, r.approvedBy = true, by.String()
	case RolloutAbortSignal:
		r.aborted = "aborted: " + strings.TrimSpace(cutText(say.Reason, 500))
		r.abortedBy = &by
	case RolloutPauseSignal:
		r.paused, r.st.Paused = true, true
	case RolloutResumeSignal:
		r.paused, r.st.Paused = false, false
	}
}
