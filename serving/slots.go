package serving

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// stage is where a connection is in its request cycle, as far as the
// server's connection slots care.
type stage uint8

const (
	// stageHeader: accepted, its request's headers not yet read (a
	// slow-header client sits here until ReadHeaderTimeout).
	stageHeader stage = iota
	// stageBody: headers read, the body not yet read to its end (a
	// slow-body client sits here until ReadTimeout).
	stageBody
	// stageBusy: the request is read and is being answered, or the
	// connection was hijacked. Never shed.
	stageBusy
	// stageIdle: kept alive between requests (until IdleTimeout). A
	// second request's headers arriving slowly also sit here: net/http
	// marks a connection active only once its headers are read.
	stageIdle
)

// Reasons a connection is shed, the label values of
// trainflow_serving_connections_shed_total.
const (
	shedIdle    = "idle"         // a kept-alive idle connection, closed to free its slot
	shedStalled = "stalled"      // the oldest one still sending headers or body
	shedClient  = "client_limit" // a new connection over its address's limit with nothing of its own to shed
)

// slots is a net.Listener that holds at most max connections, and at most
// perClient from one client IP address (if less than max), without letting idle or stalled
// connections starve new clients. A new connection that would go over a
// limit takes the slot of another: first the longest-idle kept-alive
// connection, else the one that has been sending its headers or body the
// longest. Connections answering a request are never shed; when all of
// them are, Accept waits for one to close, so further clients wait in the
// kernel's listen backlog, unread, and cost the server nothing. A new
// connection over its address's limit, with none of that address's
// connections to shed, is closed at once.
//
// Stages come from the http.Server's ConnState hook and from the request
// body (trackBody). Safe for concurrent use.
type slots struct {
	net.Listener
	max, perClient int
	shed           func(reason string) // counts a shed connection; may be nil

	mu       sync.Mutex
	open     map[*slotConn]struct{}
	byClient map[string]int
	changed  chan struct{} // closed (and replaced) when a slot may have freed

	done      chan struct{}
	closeOnce sync.Once
	nopen     atomic.Int64 // len(open), for the gauge without the lock
}

func newSlots(ln net.Listener, max, perClient int, shed func(string)) *slots {
	if perClient <= 0 || perClient > max {
		perClient = max
	}
	return &slots{
		Listener: ln, max: max, perClient: perClient, shed: shed,
		open: map[*slotConn]struct{}{}, byClient: map[string]int{},
		changed: make(chan struct{}), done: make(chan struct{}),
	}
}

// slotConn is a connection holding a slot.
type slotConn struct {
	net.Conn
	s      *slots
	client string

	// Guarded by s.mu.
	stage stage
	since time.Time // when it entered stage (its request began, for stageBody)
	held  bool      // holds its slot (false once shed or closed)
}

// Accept waits until a slot is free or can be taken, then for a
// connection, and gives it a slot, shedding another if it must.
func (s *slots) Accept() (net.Conn, error) {
	for {
		if err := s.waitRoom(""); err != nil {
			return nil, err
		}
		c, err := s.Listener.Accept()
		if err != nil {
			return nil, err
		}
		sc := &slotConn{Conn: c, s: s, client: clientOf(c.RemoteAddr())}
		if s.admit(sc) {
			return sc, nil
		}
		c.Close()
	}
}

// waitRoom waits until the server has a free slot or one it can take.
func (s *slots) waitRoom(client string) error {
	for {
		s.mu.Lock()
		if len(s.open) < s.max || s.victimLocked(client) != nil {
			s.mu.Unlock()
			return nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.done:
			return net.ErrClosed
		}
	}
}

// admit gives sc a slot, shedding connections to make room; false: sc is
// over its address's limit with nothing of that address's to shed, or
// the listener closed while it waited.
func (s *slots) admit(sc *slotConn) bool {
	var shed []*slotConn
	defer func() {
		for _, v := range shed {
			v.Conn.Close()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perClient < s.max && s.byClient[sc.client] >= s.perClient {
		v := s.victimLocked(sc.client)
		if v == nil {
			s.count(shedClient)
			return false
		}
		s.shedLocked(v)
		shed = append(shed, v)
	}
	for len(s.open) >= s.max {
		if v := s.victimLocked(""); v != nil {
			s.shedLocked(v)
			shed = append(shed, v)
			continue
		}
		// Every slot is answering a request: wait for one to close.
		ch := s.changed
		s.mu.Unlock()
		for _, v := range shed {
			v.Conn.Close()
		}
		shed = shed[:0]
		select {
		case <-ch:
		case <-s.done:
			s.mu.Lock()
			return false
		}
		s.mu.Lock()
	}
	sc.stage, sc.since, sc.held = stageHeader, time.Now(), true
	s.open[sc] = struct{}{}
	s.byClient[sc.client]++
	s.nopen.Store(int64(len(s.open)))
	return true
}

// victimLocked returns the connection a new one may take the slot of (of
// client only, unless client is ""), or nil: the longest-idle one, else
// the one that has been in its header or body stage the longest.
func (s *slots) victimLocked(client string) *slotConn {
	var idle, stalled *slotConn
	for c := range s.open {
		if client != "" && c.client != client {
			continue
		}
		switch c.stage {
		case stageIdle:
			if idle == nil || c.since.Before(idle.since) {
				idle = c
			}
		case stageHeader, stageBody:
			if stalled == nil || c.since.Before(stalled.since) {
				stalled = c
			}
		}
	}
	if idle != nil {
		return idle
	}
	return stalled
}

// shedLocked frees c's slot; the caller closes it after unlocking.
func (s *slots) shedLocked(c *slotConn) {
	if c.stage == stageIdle {
		s.count(shedIdle)
	} else {
		s.count(shedStalled)
	}
	s.releaseLocked(c)
}

func (s *slots) count(reason string) {
	if s.shed != nil {
		s.shed(reason)
	}
}

// releaseLocked frees c's slot if it holds one and wakes waiters.
func (s *slots) releaseLocked(c *slotConn) {
	if !c.held {
		return
	}
	c.held = false
	delete(s.open, c)
	if s.byClient[c.client]--; s.byClient[c.client] <= 0 {
		delete(s.byClient, c.client)
	}
	s.nopen.Store(int64(len(s.open)))
	close(s.changed)
	s.changed = make(chan struct{})
}

// set moves c to stage st.
func (s *slots) set(c *slotConn, st stage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.stage == st || !c.held {
		return
	}
	if !(c.stage == stageHeader && st == stageBody) {
		// A request stalls from its first byte: header then body.
		c.since = time.Now()
	}
	c.stage = st
	if st == stageIdle {
		// A waiting Accept may now take this slot.
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// Close closes the listener and ends a waiting Accept.
func (s *slots) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	return s.Listener.Close()
}

// Close closes the connection and frees its slot.
func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.s.mu.Lock()
	c.s.releaseLocked(c)
	c.s.mu.Unlock()
	return err
}

// clientOf is the client address connections are counted by: the IP,
// without the port.
func clientOf(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// slotOf returns the slotConn under c (a *tls.Conn on HTTPS), or nil.
func slotOf(c net.Conn) *slotConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, _ := c.(*slotConn)
	return sc
}

// connState is the http.Server's ConnState hook: it keeps the stages of
// the connections in s.
func (s *slots) connState(c net.Conn, st http.ConnState) {
	sc := slotOf(c)
	if sc == nil {
		return
	}
	switch st {
	case http.StateActive:
		// Headers read: the body (if any) comes next; trackBody moves
		// it on.
		s.set(sc, stageBody)
	case http.StateIdle:
		s.set(sc, stageIdle)
	case http.StateHijacked:
		s.set(sc, stageBusy)
	}
}

// slotKey is the context key of a request's slotConn.
type slotKey struct{}

// connContext is the http.Server's ConnContext hook: it puts the
// connection's slot in its requests' contexts.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if sc := slotOf(c); sc != nil {
		return context.WithValue(ctx, slotKey{}, sc)
	}
	return ctx
}

// trackBody wraps h: a request without a body moves its connection to
// stageBusy at once, one with a body when the body has been read to its
// end (or failed). Until then the connection may be shed for a new one.
func trackBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc, _ := r.Context().Value(slotKey{}).(*slotConn)
		if sc == nil {
			h.ServeHTTP(w, r)
			return
		}
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			sc.s.set(sc, stageBusy)
			h.ServeHTTP(w, r)
			return
		}
		// A shallow copy: net/http drains the original body after the
		// handler by its own type, which must stay as it is.
		r2 := *r
		r2.Body = &slotBody{ReadCloser: r.Body, sc: sc}
		h.ServeHTTP(w, &r2)
	})
}

// slotBody moves its connection to stageBusy once read to its end.
type slotBody struct {
	io.ReadCloser
	sc   *slotConn
	done bool
}

func (b *slotBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		b.sc.s.set(b.sc, stageBusy)
	}
	return n, err
}
