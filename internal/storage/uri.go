package storage

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// location is a parsed storage URI: where the bucket is, how to open it,
// and the prefix inside it.
type location struct {
	scheme string // file, mem, s3, gs or azblob
	bucket string // bucket or container name; mem bucket name; "" for file
	root   string // file only: absolute, cleaned directory of the bucket
	query  string // the caller's raw query, kept for URI
	prefix string // "" or a valid key followed by "/"
}

// schemes lists the URI schemes Open accepts, in the order error messages
// name them.
var schemes = []string{"file", "mem", "s3", "gs", "azblob"}

// parseURI splits uri into a location. A string without "://" is a local
// path, relative to the working directory unless absolute.
func parseURI(uri string) (location, error) {
	if strings.TrimSpace(uri) == "" {
		return location{}, fmt.Errorf("open storage %q: %w: empty", uri, ErrInvalidURI)
	}
	if !strings.Contains(uri, "://") {
		abs, err := filepath.Abs(uri)
		if err != nil {
			return location{}, fmt.Errorf("open storage %q: %w: %v", uri, ErrInvalidURI, err)
		}
		return location{scheme: "file", root: filepath.ToSlash(abs)}, nil
	}
	u, err := url.Parse(uri)
	if err != nil {
		return location{}, fmt.Errorf("open storage %q: %w: %v", uri, ErrInvalidURI, err)
	}
	shown := uri
	if u.User != nil {
		shown = u.Redacted()
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("open storage %q: %w: %s", shown, ErrInvalidURI, fmt.Sprintf(format, args...))
	}
	if u.Fragment != "" || strings.Contains(uri, "#") {
		return location{}, bad("fragment (#...) not allowed")
	}
	loc := location{scheme: u.Scheme, query: u.RawQuery}
	switch u.Scheme {
	case "file":
		if u.User != nil || (u.Host != "" && u.Host != "localhost" && u.Host != ".") {
			return location{}, bad("file URIs have no host: want file:///absolute/path or file://./relative/path")
		}
		p := u.Path
		if u.Host == "." {
			p = strings.TrimPrefix(p, "/")
		}
		if p == "" {
			return location{}, bad("missing path")
		}
		abs, err := filepath.Abs(filepath.FromSlash(p))
		if err != nil {
			return location{}, bad("%v", err)
		}
		loc.root = filepath.ToSlash(abs)
		return loc, nil
	case "mem", "s3", "gs", "azblob":
		if u.User != nil {
			return location{}, bad("credentials in the URI are not supported; use the environment")
		}
		if u.Port() != "" {
			return location{}, bad("%q is a host:port; the host of a %s URI is the bucket name (use ?endpoint= for another server)", u.Host, u.Scheme)
		}
		if u.Host == "" && u.Scheme != "mem" {
			return location{}, bad("missing bucket name: want %s://bucket/prefix", u.Scheme)
		}
		loc.bucket = u.Host
		p := strings.Trim(u.Path, "/")
		if p != "" {
			if err := checkKey(p); err != nil {
				return location{}, bad("prefix %q: not a clean slash-separated path", u.Path)
			}
			loc.prefix = p + "/"
		}
		return loc, nil
	default:
		return location{}, bad("unsupported scheme %q (want one of %s)", u.Scheme, strings.Join(schemes, ", "))
	}
}

// bucketURL is the URL handed to blob.OpenBucket: the bucket without the
// prefix. file buckets get create_dir, no_tmp_dir and metadata=skip unless
// the caller set them.
func (l location) bucketURL() string {
	u := url.URL{Scheme: l.scheme, Host: l.bucket, RawQuery: l.query}
	if l.scheme == "file" {
		u.Path = l.root
		q := u.Query()
		for k, v := range map[string]string{"create_dir": "1", "no_tmp_dir": "1", "metadata": "skip"} {
			if !q.Has(k) {
				q.Set(k, v)
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// dirMode is the mode a file:// Store creates directories with: the
// file driver's dir_file_mode query parameter (decimal, as the driver
// reads it; Open has the driver check it), else 0777 before the umask.
func (l location) dirMode() os.FileMode {
	q, _ := url.ParseQuery(l.query)
	if m, err := strconv.ParseUint(q.Get("dir_file_mode"), 10, 32); err == nil && m != 0 {
		return os.FileMode(m)
	}
	return 0o777
}

// uri returns the URI of the location with the extra prefix sub (a clean
// key or ""), in the form Open accepts. withQuery selects whether the
// caller's query is kept; error messages leave it out.
func (l location) uri(sub string, withQuery bool) string {
	p := strings.TrimSuffix(l.prefix+sub, "/")
	var s string
	if l.scheme == "file" {
		s = (&url.URL{Scheme: "file", Path: path.Join(l.root, p)}).String()
	} else {
		s = l.scheme + "://" + l.bucket
		if p != "" {
			s += (&url.URL{Path: "/" + p}).EscapedPath()
		}
	}
	if withQuery && l.query != "" {
		s += "?" + l.query
	}
	return s
}

// checkKey reports whether key is a valid object key: a non-empty,
// slash-separated path of non-empty segments other than "." and "..",
// with no leading or trailing slash and no control characters.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w %q: control character", ErrInvalidKey, key)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w %q: empty path segment (leading, trailing or double slash)", ErrInvalidKey, key)
		case ".", "..":
			return fmt.Errorf("%w %q: %q segment", ErrInvalidKey, key, seg)
		}
	}
	if isTempName(key) {
		return fmt.Errorf("%w %q: names ending in .<hex>.tmp are reserved for temporary files", ErrInvalidKey, key)
	}
	return nil
}

// checkPrefix reports whether prefix is usable with List or DeleteAll: ""
// or a key, optionally followed by "/". The last segment may be partial
// ("checkpoints/ckpt-").
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := checkKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

// isTempName reports whether key looks like a temporary file of a file://
// Store: "<name>.<hex>.tmp", as the file driver (gocloud.dev/blob/fileblob)
// names them, or ".<hex>.tmp", as WriteFunc and Copy do. One left behind
// by a crash is hidden from List.
func isTempName(key string) bool {
	rest, ok := strings.CutSuffix(key, ".tmp")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 || i == len(rest)-1 {
		return false
	}
	for _, c := range rest[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
