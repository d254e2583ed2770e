package errmark

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestMark(t *testing.T) {
	kind := errors.New("kind")
	err := Mark(fmt.Errorf("open x: %w", fs.ErrNotExist), kind)
	if err.Error() != "open x: file does not exist" {
		t.Errorf("message %q changed", err)
	}
	if !errors.Is(err, kind) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		t.Errorf("errors.Is: kind %v, wrapped %v, other %v; want true, true, false", errors.Is(err, kind), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission))
	}
	if Mark(nil, kind) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
