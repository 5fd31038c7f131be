// inbox holds the messages for one request until its reader takes them;
// tail keeps the last of what a kernel process printed.

package jupyter

import (
	"strings"
	"sync"
)

// inbox is an unbounded queue of the messages answering one request, so a
// slow HTTP client never blocks the socket readers shared by all requests.
type inbox struct {
	mu     sync.Mutex
	msgs   []received
	closed bool
	notify chan struct{}
}

func newInbox() *inbox { return &inbox{notify: make(chan struct{}, 1)} }

func (in *inbox) put(m received) {
	in.mu.Lock()
	in.msgs = append(in.msgs, m)
	in.mu.Unlock()
	in.wake()
}

func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	in.wake()
}

func (in *inbox) wake() {
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

func (in *inbox) take() []received {
	in.mu.Lock()
	defer in.mu.Unlock()
	msgs := in.msgs
	in.msgs = nil
	if in.closed {
		in.wake() // keep reporting the closed state to the next receive
	}
	return msgs
}

func (in *inbox) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
