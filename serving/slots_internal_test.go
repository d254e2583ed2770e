package serving

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// slotsTest is a slots listener on a loopback port whose accepted
// connections arrive, in order, on accepted.
type slotsTest struct {
	t        *testing.T
	sl       *slots
	accepted chan *slotConn
	shed     chan string
}

func newSlotsTest(t *testing.T, max, perClient int) *slotsTest {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &slotsTest{t: t, accepted: make(chan *slotConn), shed: make(chan string, 16)}
	st.sl = newSlots(ln, max, perClient, func(r string) { st.shed <- r })
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := st.sl.Accept()
			if err != nil {
				return
			}
			select {
			case st.accepted <- c.(*slotConn):
			case <-stop:
				c.Close()
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); st.sl.Close(); <-done })
	return st
}

// dial connects from local (nil: any) and returns the client side and the
// server's slotConn, in the given stage.
func (st *slotsTest) dial(local net.IP, stage stage) (net.Conn, *slotConn) {
	st.t.Helper()
	d := net.Dialer{}
	if local != nil {
		d.LocalAddr = &net.TCPAddr{IP: local}
	}
	c, err := d.Dial("tcp", st.sl.Addr().String())
	if err != nil {
		st.t.Fatal(err)
	}
	st.t.Cleanup(func() { c.Close() })
	sc := <-st.accepted
	st.t.Cleanup(func() { sc.Close() })
	st.sl.set(sc, stage)
	return c, sc
}

// closed reports whether the server closed c.
func closed(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestShedOrder checks which connection gives way when the slots are
// full: the longest-idle one first, then the one stalled the longest in
// its request (header then body counts from the request's start), never a
// busy one; and that a body stage keeps the time its request began.
func TestShedOrder(t *testing.T) {
	st := newSlotsTest(t, 5, 5)
	_, _ = st.dial(nil, stageBusy)
	oldBody, oldBodySC := st.dial(nil, stageHeader)
	oldIdle, _ := st.dial(nil, stageIdle)
	header, _ := st.dial(nil, stageHeader)
	newIdle, _ := st.dial(nil, stageIdle)
	// oldBody's headers complete after header began: it still began first.
	st.sl.set(oldBodySC, stageBody)

	for i, want := range []struct {
		c      net.Conn
		name   string
		reason string
	}{{oldIdle, "older idle", shedIdle}, {newIdle, "newer idle", shedIdle}, {oldBody, "older stalled body", shedStalled}, {header, "newer stalled header", shedStalled}} {
		st.dial(nil, stageBusy)
		if r := <-st.shed; r != want.reason {
			t.Fatalf("new connection %d shed for reason %q, want %q (%s)", i, r, want.reason, want.name)
		}
		if !closed(want.c) {
			t.Fatalf("new connection %d: %s still open, want it shed", i, want.name)
		}
	}
	// Five busy: the next connection waits for a slot.
	if n := st.sl.nopen.Load(); n != 5 {
		t.Fatalf("%d open, want 5", n)
	}
	c, err := net.Dial("tcp", st.sl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case sc := <-st.accepted:
		t.Fatalf("connection %v accepted with every slot busy", sc.RemoteAddr())
	case <-time.After(200 * time.Millisecond):
	}
}

// TestShedPerClient checks that a new connection over its address's
// limit takes the slot of that address's own idle connection, not of
// another address's older one, and is closed if it has none to give.
func TestShedPerClient(t *testing.T) {
	st := newSlotsTest(t, 10, 2)
	other, _ := st.dial(net.IPv4(127, 0, 0, 1), stageIdle)
	mine, _ := st.dial(net.IPv4(127, 0, 0, 2), stageIdle)
	_, busy := st.dial(net.IPv4(127, 0, 0, 2), stageBusy)
	st.dial(net.IPv4(127, 0, 0, 2), stageBusy)
	if r := <-st.shed; r != shedIdle || !closed(mine) {
		t.Fatalf("shed %q, want 127.0.0.2's own idle connection", r)
	}
	// 127.0.0.2 holds two busy connections: its third is closed.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", st.sl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r := <-st.shed; r != shedClient || !closed(c) {
		t.Fatalf("shed %q, want the new connection of 127.0.0.2 closed (client_limit)", r)
	}
	// Its slot frees once one of its own closes.
	busy.Close()
	st.dial(net.IPv4(127, 0, 0, 2), stageBusy)
	other.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := other.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("127.0.0.1's idle connection: %v, want it left open", err)
	}
}
