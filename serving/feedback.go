package serving

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"strconv"
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

// signedMACLen is the length of a signed request ID's MAC: the first
// 16 bytes of its HMAC-SHA256, base64url without padding.
const signedMACLen = 22

// signID returns request ID base extended with what sv predicted for
// the first maxFeedbackRows of the n instances in sc and its MAC under
// Options.FeedbackKey, "BASE.VERSION.C0-C1-….MAC" (classes by index in
// base 36), for a classifier with a key and a base of at most
// maxFeedbackID bytes; false otherwise.
func (s *Server) signID(base string, sv *Servable, sc *scratch, n int) (string, bool) {
	k := sv.Bundle.Model.NumClasses()
	if len(s.opts.FeedbackKey) == 0 || k == 0 || base == "" || len(base) > maxFeedbackID {
		return "", false
	}
	b := make([]byte, 0, len(base)+24+3*min(n, maxFeedbackRows)+signedMACLen)
	b = append(b, base...)
	b = append(b, '.')
	b = strconv.AppendInt(b, sv.Version, 10)
	b = append(b, '.')
	for i := range min(n, maxFeedbackRows) {
		if i > 0 {
			b = append(b, '-')
		}
		b = strconv.AppendInt(b, int64(argmax(sc.probs[i*k:(i+1)*k])), 36)
	}
	b = append(b, '.')
	return string(append(b, s.idMAC(sv.Model, b[:len(b)-1])...)), true
}

// idMAC is the MAC of a signed request ID's signed part for model, its
// HMACs pooled in s.macs.
func (s *Server) idMAC(model string, signed []byte) string {
	m, _ := s.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, s.opts.FeedbackKey)
	}
	m.Reset()
	m.Write([]byte(model))
	m.Write([]byte{0})
	m.Write(signed)
	var sum [sha256.Size]byte
	var out [signedMACLen]byte
	base64.RawURLEncoding.Encode(out[:], m.Sum(sum[:0])[:16])
	s.macs.Put(m)
	return string(out[:])
}

// signedPrediction is what a signed request ID says: the version that
// answered and its predicted class indices.
type signedPrediction struct {
	version int64
	classes []int32
}

// parseSignedID checks id's MAC for model and returns what it says, or
// an error saying why it is not a signed ID of this repository.
func (s *Server) parseSignedID(model, id string) (signedPrediction, error) {
	var p signedPrediction
	i := strings.LastIndexByte(id, '.')
	if i < 0 || len(id)-i-1 != signedMACLen {
		return p, fmt.Errorf("no signature")
	}
	if !hmac.Equal([]byte(s.idMAC(model, []byte(id[:i]))), []byte(id[i+1:])) {
		return p, fmt.Errorf("signature does not match (tampered, forged, of another model or another repository's key)")
	}
	fields := strings.Split(id[:i], ".")
	if len(fields) < 3 {
		return p, fmt.Errorf("malformed")
	}
	v, err := strconv.ParseInt(fields[len(fields)-2], 10, 64)
	if err != nil || v <= 0 {
		return p, fmt.Errorf("malformed version")
	}
	p.version = v
	for _, c := range strings.Split(fields[len(fields)-1], "-") {
		x, err := strconv.ParseInt(c, 36, 32)
		if err != nil || x < 0 || len(p.classes) == maxFeedbackRows {
			return p, fmt.Errorf("malformed classes")
		}
		p.classes = append(p.classes, int32(x))
	}
	return p, nil
}

// seenSet holds the newest signed request IDs counted on this server,
// so that each counts once here while it is among them. Safe for
// concurrent use.
type seenSet struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

func newSeenSet(size int) *seenSet {
	return &seenSet{set: make(map[string]struct{}), ring: make([]string, size)}
}

// add adds id and reports whether it was not in the set.
func (m *seenSet) add(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.set[id]; ok {
		return false
	}
	if old := m.ring[m.next]; old != "" {
		delete(m.set, old)
	}
	m.ring[m.next] = id
	m.next = (m.next + 1) % len(m.ring)
	m.set[id] = struct{}{}
	return true
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
// replica's, too old, or already given) is a 404. With
// Options.FeedbackKey the request ID is a signed one (signedFeedback),
// which any server with the key counts, and one whose signature does not
// hold is a 400 naming request_id.
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
	if !ok && len(s.opts.FeedbackKey) > 0 {
		return s.signedFeedback(c, model, req, label)
	}
	if !ok || e.model != model {
		return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("request_id %q: not a recent routed prediction of model %q on this server", clipKey([]byte(req.RequestID)), model)}
	}
	if req.Instance >= e.n {
		return badRequest("instance %d: the prediction had %d instances remembered", req.Instance, e.n)
	}
	return s.countFeedback(c, req.RequestID, e.tel, e.classes[req.Instance], label)
}

// signedFeedback counts feedback on a signed request ID (signID): any
// server holding the repository's key counts it, once per ID while the
// ID is among its seenSet's.
func (s *Server) signedFeedback(c echo.Context, model string, req feedbackRequest, label string) error {
	p, err := s.parseSignedID(model, req.RequestID)
	if err != nil {
		return badRequest("request_id %q: not a routed prediction ID of model %q signed by this repository's servers: %v", clipKey([]byte(req.RequestID)), model, err)
	}
	if req.Instance >= len(p.classes) {
		return badRequest("instance %d: the prediction had %d instances remembered", req.Instance, len(p.classes))
	}
	sv, err := s.reg.Get(model, p.version)
	if err != nil || sv.tel == nil {
		return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("request_id: version %d of model %q is not loaded on this server", p.version, model)}
	}
	if int(p.classes[req.Instance]) >= len(sv.tel.classes) {
		return badRequest("request_id: class %d of version %d: it has %d classes", p.classes[req.Instance], p.version, len(sv.tel.classes))
	}
	if !s.seen.add(req.RequestID) {
		return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf("request_id %q: already counted on this server", clipKey([]byte(req.RequestID)))}
	}
	return s.countFeedback(c, req.RequestID, sv.tel, p.classes[req.Instance], label)
}

// countFeedback counts label as the true class of a prediction of class
// index class by the version of tel, and answers it.
func (s *Server) countFeedback(c echo.Context, id string, tel *versionTel, class int32, label string) error {
	predicted := tel.classes[class]
	correct := predicted == label
	tel.live.labelled.Add(1)
	if correct {
		tel.live.correct.Add(1)
	}
	return c.JSON(http.StatusOK, feedbackResponse{RequestID: id, ModelVersion: fmt.Sprint(tel.version), Predicted: predicted, Correct: correct})
}
