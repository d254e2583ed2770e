package mlapi

import (
	"fmt"
	"net/http"
)

// apiError is an answer other than 200, in Google's error shape: code is
// the HTTP status, status the canonical code's name (INVALID_ARGUMENT,
// NOT_FOUND, ALREADY_EXISTS, ...), msg safe for the client.
type apiError struct {
	code   int
	status string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// errorBody is Google's JSON error: {"error": {"code", "message", "status"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
}

// invalid is a 400 INVALID_ARGUMENT; its message starts with the field's
// JSON path.
func invalid(format string, args ...any) error {
	return &apiError{code: http.StatusBadRequest, status: "INVALID_ARGUMENT", msg: fmt.Sprintf(format, args...)}
}

// notFound is a 404 NOT_FOUND.
func notFound(format string, args ...any) error {
	return &apiError{code: http.StatusNotFound, status: "NOT_FOUND", msg: fmt.Sprintf(format, args...)}
}

// tooLarge is the 413 of a body over limit bytes.
func tooLarge(limit int64) error {
	return &apiError{code: http.StatusRequestEntityTooLarge, status: "INVALID_ARGUMENT", msg: fmt.Sprintf("request body: larger than %d bytes", limit)}
}
