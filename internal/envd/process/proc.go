package process

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/reap"
)

// drainGrace is how long output readers may run on after the process
// exits. A background job the command left behind can hold the pipes open
// forever; past this grace envd drains what is already buffered and ends
// the stream rather than wait for that job.
const drainGrace = 200 * time.Millisecond

// proc is one process started through the service. Its output is fanned out
// to every attached stream; each stream has its own unbounded queue, so a
// slow client never stalls the process or the other clients.
type proc struct {
	pid    uint32
	tag    string
	config *pb.ProcessConfig
	child  *reap.Child

	inMu  sync.Mutex
	stdin *os.File // pipe to stdin, or the pty master; nil once closed
	isPTY bool
	ptmx  *os.File

	// exited is set once the kernel has released the pid, after which it
	// may belong to an unrelated process and must not be signalled.
	exited atomic.Bool

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	end  *pb.ProcessEvent // set once, when the process has ended
	done chan struct{}
}

// subscriber is the queue of one attached stream.
type subscriber struct {
	mu    sync.Mutex
	queue []*pb.ProcessEvent
	wake  chan struct{}
}

func (s *subscriber) push(ev *pb.ProcessEvent) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) take() []*pb.ProcessEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// subscribe attaches a new stream. A process that already ended hands the
// new stream its end event straight away.
func (p *proc) subscribe() *subscriber {
	s := &subscriber{wake: make(chan struct{}, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		s.push(p.end)
		return s
	}
	p.subs[s] = struct{}{}
	return s
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

func (p *proc) publish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		s.push(ev)
	}
}

func (p *proc) finish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	p.end = ev
	for s := range p.subs {
		s.push(ev)
	}
	p.subs = nil
	p.mu.Unlock()
	close(p.done)
}

func dataEvent(kind string, b []byte) *pb.ProcessEvent {
	d := &pb.ProcessEvent_DataEvent{}
	switch kind {
	case "stdout":
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case "stderr":
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// output is one stream of bytes from the process (stdout, stderr or pty).
type output struct {
	kind string
	f    *os.File
	done chan struct{}
}

// read forwards f's bytes until EOF, or until stop() has been called and
// everything already buffered has been drained.
func (p *proc) read(o *output) {
	defer close(o.done)
	buf := make([]byte, 32*1024)
	for {
		n, err := o.f.Read(buf)
		if n > 0 {
			p.publish(dataEvent(o.kind, append([]byte(nil), buf[:n]...)))
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.drainNonBlocking(o, buf)
		}
		return
	}
}

// drainNonBlocking reads what the kernel holds for o without waiting, so
// ending a stream early never loses output that was already written.
func (p *proc) drainNonBlocking(o *output, buf []byte) {
	rc, err := o.f.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		rc.Control(func(fd uintptr) { n, rerr = syscall.Read(int(fd), buf) })
		if n > 0 {
			p.publish(dataEvent(o.kind, append([]byte(nil), buf[:n]...)))
		}
		if rerr != nil || n <= 0 {
			return
		}
	}
}

// wait collects the exit status once the process is gone and all its output
// has been forwarded, then publishes the end event.
func (p *proc) wait(outputs []*output, onEnd func()) {
	ws := p.child.Wait()
	p.exited.Store(true)
	timer := time.NewTimer(drainGrace)
	for _, o := range outputs {
		select {
		case <-o.done:
		case <-timer.C:
			// Interrupts a reader blocked on an empty pipe that a
			// left-behind job keeps open.
			for _, o := range outputs {
				o.f.SetReadDeadline(time.Now())
			}
			<-o.done
		}
	}
	timer.Stop()
	for _, o := range outputs {
		<-o.done
		if o.f != p.ptmx {
			o.f.Close()
		}
	}
	p.closeInput()
	if p.ptmx != nil {
		p.ptmx.Close()
	}
	p.finish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: endEvent(ws)}})
	onEnd()
}

// endEvent describes how a process ended. A process that did not exit
// with 0 also carries the status as its error, as E2B's agent sends it:
// the SDKs make that the message of the CommandExitError they raise.
func endEvent(ws syscall.WaitStatus) *pb.ProcessEvent_EndEvent {
	var end *pb.ProcessEvent_EndEvent
	switch {
	case ws.Exited():
		end = &pb.ProcessEvent_EndEvent{ExitCode: int32(ws.ExitStatus()), Exited: true, Status: fmt.Sprintf("exit status %d", ws.ExitStatus())}
	case ws.Signaled():
		end = &pb.ProcessEvent_EndEvent{ExitCode: -1, Exited: false, Status: "signal: " + ws.Signal().String()}
	default:
		end = &pb.ProcessEvent_EndEvent{ExitCode: -1, Status: fmt.Sprintf("unknown wait status %#x", uint32(ws))}
	}
	if end.ExitCode != 0 {
		end.Error = &end.Status
	}
	return end
}

var errNoStdin = errors.New("the process has no open stdin (it was started without stdin, or stdin was closed)")

// write sends input to the process.
func (p *proc) write(b []byte) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin == nil {
		return errNoStdin
	}
	_, err := p.stdin.Write(b)
	return err
}

// closeStdin signals end of input: the pipe closes, or for a terminal the
// line discipline gets an end-of-file character, as a user pressing Ctrl-D.
func (p *proc) closeStdin() error {
	if p.isPTY {
		p.inMu.Lock()
		defer p.inMu.Unlock()
		if p.stdin == nil {
			return errNoStdin
		}
		_, err := p.stdin.Write([]byte{0x04})
		return err
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin == nil {
		return errNoStdin
	}
	err := p.stdin.Close()
	p.stdin = nil
	return err
}

func (p *proc) closeInput() {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin != nil && p.stdin != p.ptmx {
		p.stdin.Close()
	}
	p.stdin = nil
}

// signal delivers sig to the process's group (it leads one: a session for a
// terminal, a group otherwise), so helpers a shell started go with it.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited.Load() {
		return nil // its end event is on its way
	}
	err := syscall.Kill(-int(p.pid), sig)
	if err != nil {
		err = syscall.Kill(int(p.pid), sig)
	}
	if errors.Is(err, syscall.ESRCH) {
		return nil // already gone; its end event is on its way
	}
	return err
}
