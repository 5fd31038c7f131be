package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrDied is returned by requests whose kernel process exited before
// answering them.
var ErrDied = errors.New("kernel died")

// ErrUnresponsive is returned by Execute when an interrupted kernel does not
// become idle again within InterruptGrace.
var ErrUnresponsive = errors.New("kernel did not respond to an interrupt")

// InterruptGrace is how long Execute waits for an interrupted kernel to
// report idle before giving up on it.
var InterruptGrace = 10 * time.Second

// StartOptions configures a kernel process.
type StartOptions struct {
	Dir          string        // working directory of the kernel process
	Env          []string      // full environment ("K=V"); the spec's env is added on top
	ReadyTimeout time.Duration // launch until the kernel answers; default 60 s
	Logger       *slog.Logger
	// Spawn starts the process and returns a function that waits for its
	// exit. Default: cmd.Start and cmd.Wait. A process that reaps every
	// child (PID 1) passes its reaper's, so exit statuses are not lost.
	Spawn func(*exec.Cmd) (wait func() syscall.WaitStatus, err error)
}

// Kernel is one running kernel process and the sockets connected to it.
type Kernel struct {
	spec    Spec
	log     *slog.Logger
	sign    signer
	session string
	tmpDir  string
	cmd     *exec.Cmd
	output  *tail
	copied  chan struct{} // closed once the output pipe has been read to its end
	waitFn  func() error

	// sockCtx ends when the process exits or the kernel is closed; it stops
	// dials that wait for a kernel that will never bind.
	sockCtx    context.Context
	sockCancel context.CancelFunc

	shell, control, stdin, iopub, hb zmq4.Socket
	sendMu                           sync.Mutex

	mu      sync.Mutex
	inboxes map[string]*inbox // by request msg_id

	done    chan struct{} // closed once the process has exited
	exitErr error         // set before done is closed

	closeOnce sync.Once
}

// connectionInfo is the kernel's connection file.
type connectionInfo struct {
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	IP              string `json:"ip"`
	Key             string `json:"key"`
	Transport       string `json:"transport"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name"`
}

// Start launches the kernel described by spec and returns once it answers a
// kernel_info_request on shell and publishes on iopub, so the first
// execution's output cannot be lost to a late subscription.
func Start(ctx context.Context, spec Spec, opts StartOptions) (_ *Kernel, err error) {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("kernel", spec.Name)

	ports, err := freePorts(5)
	if err != nil {
		return nil, fmt.Errorf("pick kernel ports: %w", err)
	}
	ci := connectionInfo{
		ShellPort: ports[0], IOPubPort: ports[1], StdinPort: ports[2], ControlPort: ports[3], HBPort: ports[4],
		IP: "127.0.0.1", Key: NewID(), Transport: "tcp", SignatureScheme: "hmac-sha256", KernelName: spec.Name,
	}
	tmpDir, err := os.MkdirTemp("", "cube-kernel-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmpDir)
		}
	}()
	connFile := tmpDir + "/connection.json"
	data, _ := json.Marshal(ci)
	if err := os.WriteFile(connFile, data, 0o600); err != nil {
		return nil, err
	}

	argv := make([]string, len(spec.Argv))
	for i, a := range spec.Argv {
		a = strings.ReplaceAll(a, "{connection_file}", connFile)
		argv[i] = strings.ReplaceAll(a, "{resource_dir}", spec.Dir)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = opts.Dir
	cmd.Env = opts.Env
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Our own pipe rather than an io.Writer: exec would only release the
	// copying goroutine in cmd.Wait, which a reaper-provided Spawn skips.
	out := &tail{max: 4096}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	cmd.Stderr = pw
	// Own process group: an interrupt or kill reaches the kernel and
	// whatever it spawned, and never cube-envd itself. Pdeathsig: a kernel
	// must not outlive a server that crashed without Close.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	waitFn, err := spawn(cmd, opts.Spawn)
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("start kernel %s: %w", spec.Name, err)
	}
	copied := make(chan struct{})
	go func() {
		io.Copy(out, pr)
		pr.Close()
		close(copied)
	}()

	sockCtx, sockCancel := context.WithCancel(context.Background())
	k := &Kernel{
		spec:       spec,
		log:        logger.With("pid", cmd.Process.Pid),
		sign:       signer{key: []byte(ci.Key)},
		session:    NewID(),
		tmpDir:     tmpDir,
		cmd:        cmd,
		output:     out,
		copied:     copied,
		waitFn:     waitFn,
		sockCtx:    sockCtx,
		sockCancel: sockCancel,
		inboxes:    map[string]*inbox{},
		done:       make(chan struct{}),
	}
	go k.wait()
	defer func() {
		if err != nil {
			k.Kill()
		}
	}()

	readyCtx, cancel := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancel()
	stop := context.AfterFunc(readyCtx, sockCancel) // unblock dials on timeout
	defer stop()

	if err := k.connect(ci); err != nil {
		return nil, k.startError(readyCtx, err)
	}
	if err := k.awaitReady(readyCtx); err != nil {
		return nil, k.startError(readyCtx, err)
	}
	k.log.Debug("kernel ready")
	return k, nil
}

// startError explains why a launch failed, preferring what the kernel
// itself printed (a missing module, a bad argv) over socket errors.
func (k *Kernel) startError(ctx context.Context, err error) error {
	select {
	case <-k.done:
		// The process has exited, but what it printed last may still be
		// in the pipe; the pipe ends when every process holding it has
		// exited, which a child left behind could delay.
		select {
		case <-k.copied:
		case <-time.After(time.Second):
		}
		return fmt.Errorf("kernel %s exited during startup (%v): %s", k.spec.Name, k.exitErr, k.output.String())
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("kernel %s did not become ready: %w; output: %s", k.spec.Name, ctx.Err(), k.output.String())
	}
	return fmt.Errorf("kernel %s: %w", k.spec.Name, err)
}

// spawn starts cmd and returns how to wait for it, as an error describing
// the exit ("exit status 1", "signal: killed").
func spawn(cmd *exec.Cmd, custom func(*exec.Cmd) (func() syscall.WaitStatus, error)) (func() error, error) {
	if custom != nil {
		wait, err := custom(cmd)
		if err != nil {
			return nil, err
		}
		return func() error {
			ws := wait()
			if ws.Signaled() {
				return fmt.Errorf("signal: %v", ws.Signal())
			}
			return fmt.Errorf("exit status %d", ws.ExitStatus())
		}, nil
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() error {
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return errors.New("exit status 0")
		case errors.As(err, &exit):
			return exit
		default:
			// Someone else reaped it (a PID 1 reaper): the status is gone.
			return fmt.Errorf("exit status unknown: %w", err)
		}
	}, nil
}

func (k *Kernel) wait() {
	k.exitErr = k.waitFn()
	close(k.done)
	k.sockCancel()
	k.mu.Lock()
	for _, in := range k.inboxes {
		in.close()
	}
	k.mu.Unlock()
	k.log.Debug("kernel process exited", "err", k.exitErr)
}

func (k *Kernel) connect(ci connectionInfo) error {
	zlog := log.New(io.Discard, "", 0)
	opts := func(extra ...zmq4.Option) []zmq4.Option {
		// A kernel needs about a second to bind its ports; keep dialing
		// until it does or sockCtx ends (exit or ready timeout).
		return append([]zmq4.Option{zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(50 * time.Millisecond), zmq4.WithLogger(zlog)}, extra...)
	}
	addr := func(port int) string { return fmt.Sprintf("tcp://%s:%d", ci.IP, port) }
	// stdin must share shell's identity: the kernel routes input_request
	// to the stdin peer with the identity of the shell request's sender.
	id := zmq4.SocketIdentity(NewID())
	k.shell = zmq4.NewDealer(k.sockCtx, opts(zmq4.WithID(id))...)
	k.stdin = zmq4.NewDealer(k.sockCtx, opts(zmq4.WithID(id))...)
	k.control = zmq4.NewDealer(k.sockCtx, opts()...)
	k.iopub = zmq4.NewSub(k.sockCtx, opts()...)
	k.hb = zmq4.NewReq(k.sockCtx, opts()...)
	for _, c := range []struct {
		s    zmq4.Socket
		port int
		name string
	}{{k.shell, ci.ShellPort, "shell"}, {k.iopub, ci.IOPubPort, "iopub"}, {k.control, ci.ControlPort, "control"}, {k.stdin, ci.StdinPort, "stdin"}, {k.hb, ci.HBPort, "heartbeat"}} {
		if err := c.s.Dial(addr(c.port)); err != nil {
			return fmt.Errorf("connect %s: %w", c.name, err)
		}
	}
	if err := k.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return fmt.Errorf("subscribe iopub: %w", err)
	}
	go k.read("shell", k.shell)
	go k.read("control", k.control)
	go k.read("iopub", k.iopub)
	go k.read("stdin", k.stdin)
	return nil
}

// awaitReady repeats kernel_info_request until one is answered on shell and
// seen on iopub: a SUB socket only receives after its subscription reached
// the kernel, and nothing tells us when that happened.
func (k *Kernel) awaitReady(ctx context.Context) error {
	for {
		id, in := k.request()
		if err := k.send(k.shell, id, "kernel_info_request", struct{}{}); err != nil {
			k.drop(id)
			return err
		}
		var gotReply, gotIOPub bool
		timer := time.NewTimer(500 * time.Millisecond)
	wait:
		for !gotReply || !gotIOPub {
			select {
			case <-ctx.Done():
				timer.Stop()
				k.drop(id)
				return ctx.Err()
			case <-k.done:
				timer.Stop()
				k.drop(id)
				return ErrDied
			case <-timer.C:
				break wait
			case <-in.notify:
				for _, m := range in.take() {
					if m.channel == "iopub" {
						gotIOPub = true
					} else if m.Type() == "kernel_info_reply" {
						gotReply = true
					}
				}
			}
		}
		timer.Stop()
		k.drop(id)
		if gotReply && gotIOPub {
			return k.Ping(ctx)
		}
	}
}

// Ping checks the heartbeat channel: the kernel echoes what it receives.
func (k *Kernel) Ping(ctx context.Context) error {
	res := make(chan error, 1)
	go func() {
		if err := k.hb.Send(zmq4.NewMsgString("ping")); err != nil {
			res <- err
			return
		}
		_, err := k.hb.Recv()
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("heartbeat: %w", ctx.Err())
	case <-k.done:
		return ErrDied
	}
}

// Done is closed once the kernel process has exited.
func (k *Kernel) Done() <-chan struct{} { return k.done }

// ExitErr says how the process ended; valid once Done is closed.
func (k *Kernel) ExitErr() error {
	<-k.done
	return k.exitErr
}

// Output returns the tail of what the kernel process printed itself.
func (k *Kernel) Output() string { return k.output.String() }

// Pid returns the kernel's process id (also its process group id).
func (k *Kernel) Pid() int { return k.cmd.Process.Pid }

func (k *Kernel) exited() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// Shutdown asks the kernel to exit and kills it if it has not after grace.
func (k *Kernel) Shutdown(grace time.Duration) {
	if !k.exited() {
		id, _ := k.request()
		if err := k.send(k.control, id, "shutdown_request", map[string]bool{"restart": false}); err == nil {
			t := time.NewTimer(grace)
			select {
			case <-k.done:
			case <-t.C:
			}
			t.Stop()
		}
		k.drop(id)
	}
	k.Kill()
}

// Kill ends the kernel's whole process group at once, waits for it, and
// releases the sockets and connection file.
func (k *Kernel) Kill() {
	k.closeOnce.Do(func() {
		// The group may outlive the kernel (children it spawned).
		syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.done
		for _, s := range []zmq4.Socket{k.shell, k.control, k.stdin, k.iopub, k.hb} {
			if s != nil {
				s.Close()
			}
		}
		os.RemoveAll(k.tmpDir)
	})
}

// freePorts asks the OS for n distinct free TCP ports on loopback. They are
// released before the kernel binds them, the same small race every Jupyter
// frontend accepts.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
