package serving

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/trainflow/trainflow/bundle"
)

// Bounds of the feedback memory: the routed predictions of the last
// feedbackMemorySize requests are remembered, their first
// maxFeedbackRows instances each, under request IDs of at most
// maxFeedbackID bytes (a longer client ID is not remembered).
const (
	feedbackMemorySize = 1 << 15
	maxFeedbackRows    = 8
	maxFeedbackID      = 128
	feedbackBodyLimit  = 16 << 10
)

// feedbackMemory remembers which version answered a routed request and
// what it predicted, for the feedback endpoint: a ring of the newest
// requests' IDs and a map from ID to entry. Safe for concurrent use.
type feedbackMemory struct {
	mu   sync.Mutex
	byID map[string]feedbackEntry
	ring []string
	next int
}

// feedbackEntry is one remembered request: the counters of the version
// that answered, and its predicted class per instance (a classifier) or
// value (a regressor: feedback is not counted).
type feedbackEntry struct {
	tel     *versionTel
	model   string
	n       int
	classes [maxFeedbackRows]int32
}

func newFeedbackMemory(size int) *feedbackMemory {
	return &feedbackMemory{byID: make(map[string]feedbackEntry), ring: make([]string, size)}
}

// remember records request id's answer by sv: n instances in sc.
func (m *feedbackMemory) remember(id string, sv *Servable, sc *scratch, n int) {
	k := sv.Bundle.Model.NumClasses()
	if k == 0 || len(id) > maxFeedbackID || id == "" {
		return
	}
	e := feedbackEntry{tel: sv.tel, model: sv.Model, n: min(n, maxFeedbackRows)}
	for i := range e.n {
		e.classes[i] = int32(argmax(sc.probs[i*k : (i+1)*k]))
	}
	m.mu.Lock()
	if old := m.ring[m.next]; old != "" {
		delete(m.byID, old)
	}
	m.ring[m.next] = id
	m.next = (m.next + 1) % len(m.ring)
	m.byID[id] = e
	m.mu.Unlock()
}

// take removes and returns the entry of id.
func (m *feedbackMemory) take(id string) (feedbackEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	delete(m.byID, id) // its ring slot is reused in turn
	return e, ok
}

// feedbackRequest is the body of POST /v1/models/NAME/feedback.
type feedbackRequest struct {
	RequestID string          `json:"request_id"`
	Label     json.RawMessage `json:"label"`
	Instance  int             `json:"instance"`
}

// feedbackResponse answers it: the version that made the prediction and
// whether it was right.
type feedbackResponse struct {
	RequestID    string `json:"request_id"`
	ModelVersion string `json:"model_version"`
	Predicted    string `json:"predicted"`
	Correct      bool   `json:"correct"`
}

// postFeedback takes the true label of instance Instance (default 0) of
// an earlier routed prediction of a classifier, by its X-Request-Id, and
// counts it in the online accuracy of the version that answered. Each
// request ID is taken once; one this server does not remember (another
// replica's, too old, or already given) is a 404.
func (s *Server) postFeedback(c echo.Context) error {
	model := c.Param("name")
	if !bundle.ValidName(model) {
		return badRequest("model name %q: letters, digits and '_', starting with a letter", model)
	}
	body, err := readBody(nil, c.Request(), feedbackBodyLimit)
	if err != nil {
		return err
	}
	var req feedbackRequest
	if err := strictDecode(body, &req, `{"request_id": "…", "label": "class", "instance": 0}`); err != nil {
		return err
	}
	switch {
	case req.RequestID == "":
		return badRequest("request_id: missing (the X-Request-Id of the prediction)")
	case len(bytes.TrimSpace(req.Label)) == 0 || string(bytes.TrimSpace(req.Label)) == "null":
		return badRequest("label: missing (the true class)")
	case req.Instance < 0 || req.Instance >= maxFeedbackRows:
		return badRequest("instance %d: want 0 to %d", req.Instance, maxFeedbackRows-1)
	}
	label := string(bytes.TrimSpace(req.Label))
	if strings.HasPrefix(label, `"`) {
		if err := json.Unmarshal(req.Label, &label); err != nil {
			return badRequest("label: %v", err)
		}
	}
	e, ok := s.feedback.take(req.RequestID)
	if !ok || e.model != model {
		return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("request_id %q: not a recent routed prediction of model %q on this server", clipKey([]byte(req.RequestID)), model)}
	}
	if req.Instance >= e.n {
		return badRequest("instance %d: the prediction had %d instances remembered", req.Instance, e.n)
	}
	predicted := e.tel.classes[e.classes[req.Instance]]
	correct := predicted == label
	e.tel.live.labelled.Add(1)
	if correct {
		e.tel.live.correct.Add(1)
	}
	return c.JSON(http.StatusOK, feedbackResponse{RequestID: req.RequestID, ModelVersion: fmt.Sprint(e.tel.version), Predicted: predicted, Correct: correct})
}
