// Package errmark marks an error as one of a kind, a sentinel matched
// with errors.Is, without changing its message: how a package tells its
// callers "not found" or "bad configuration" while its errors still read
// as they did.
package errmark

// Mark returns an error with err's message and chain that also matches
// kind with errors.Is; nil if err is nil.
func Mark(err, kind error) error {
	if err == nil {
		return nil
	}
	return marked{err, kind}
}

type marked struct {
	error
	kind error
}

func (m marked) Is(target error) bool { return target == m.kind }

func (m marked) Unwrap() error { return m.error }
