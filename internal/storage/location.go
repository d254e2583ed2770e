package storage

import "strings"

// IsURI reports whether loc is a storage URI (scheme://…) rather than a
// plain local path: how a --jobs, --models or --data-roots value, or a
// location in a job spec, says which it is.
func IsURI(loc string) bool { return strings.Contains(loc, "://") }
