package serving

// FNV64a exports fnv64a to the external tests.
var FNV64a = fnv64a

// HoldLive counts n live predictions in flight on s, as n requests being
// answered would, until release is called.
func HoldLive(s *Server, n int) (release func()) {
	for range n {
		s.capacity.begin()
	}
	return func() {
		for range n {
			s.capacity.end()
		}
	}
}

// ShadowPending returns the copies s queued for its shadow worker and
// has not answered yet.
func ShadowPending(s *Server) int64 { return s.shadowPending.Load() }

// BlockShadow makes s's shadow worker, as it starts each copy, send on
// started and wait until release is closed. Call it before the first
// shadowed request.
func BlockShadow(s *Server, started chan<- struct{}, release <-chan struct{}) {
	s.shadowHook = func() {
		started <- struct{}{}
		<-release
	}
}
