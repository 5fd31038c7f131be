"""The JavaScript and TypeScript kernels: one persistent node process per
kernel running driver.js, which evaluates the cells.

The kernel sends each cell to the driver as a JSON line on one pipe and reads
the driver's replies (a result, an error, then "done") as JSON lines on
another; the driver's own stdout and stderr (console.log, console.error,
process.stdout.write) are forwarded as stream messages. If node dies, a fresh
one starts for the next cell.
"""

import json
import os
import signal
import subprocess

from ._child import ChildKernel, Stream

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.js")
# How many stream chunks a cell's driver sends are published one by one
# before chunks that arrive together are joined (see _pump).
CHUNKS = 1000


class NodeKernel(ChildKernel):
    """A kernel whose cells a driver process runs; the Java kernel uses it
    with a JVM in place of node (command, encode_request)."""

    implementation_version = "1.0"
    mode = "javascript"  # or "typescript"
    process_name = "node"

    def command(self, req_fd, rep_fd):
        """The driver's argv; it reads cells from req_fd, replies on rep_fd."""
        return ["node", DRIVER, self.mode, str(req_fd), str(rep_fd)]

    def encode_request(self, code, silent):
        return (json.dumps({"code": code, "silent": silent}) + "\n").encode()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._proc = None

    def _node(self):
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._close()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                self.command(req_r, rep_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(req_r, rep_w),
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._req = os.fdopen(req_w, "wb", buffering=0)
        self._rep = Stream("replies", rep_r)
        self._rep_buf = ""
        return self._proc

    def _close(self):
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for f in (self._proc.stdout, self._proc.stderr, self._req):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self._rep.fd)
        except OSError:
            pass
        self._proc = None

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False):
        if not code.strip():
            return self.ok()
        proc = self._node()
        previous = self.ignore_sigint()
        try:
            try:
                self._req.write(self.encode_request(code, silent))
            except OSError:
                pass
            return self._pump(proc, silent)
        finally:
            signal.signal(signal.SIGINT, previous)

    def _pump(self, proc, silent):
        out = Stream("stdout", proc.stdout.fileno())
        err = Stream("stderr", proc.stderr.fileno())
        by_fd = {s.fd: s for s in (out, err, self._rep)}
        reply = None
        chunks = 0  # stream lines of this cell's replies
        while True:
            fds = [fd for fd, s in by_fd.items() if not s.eof]
            if not fds:
                break
            ready = self.wait_readable(fds)
            # Output first: it was written before the reply that follows it.
            for fd in sorted(ready, key=lambda fd: fd == self._rep.fd):
                s = by_fd[fd]
                text = s.read()
                if s is not self._rep:
                    self.publish_stream(s.name, text, silent)
                    continue
                lines = (self._rep_buf + text).split("\n")
                self._rep_buf = lines.pop()
                pending = None  # [name, text]: stream chunks not published yet
                for i, line in enumerate(lines):
                    msg = json.loads(line)
                    if msg["type"] == "stream":
                        # Output the driver sends itself (CubeJShell's
                        # System.out), a message per chunk as it came; past
                        # the first CHUNKS of a cell, chunks read together
                        # go as one, so a flood of prints costs what it
                        # would through a pipe.
                        chunks += 1
                        if pending and pending[0] == msg["name"] and chunks > CHUNKS:
                            pending[1] += msg["text"]
                            continue
                        if pending:
                            self.publish_stream(pending[0], pending[1], silent)
                        pending = [msg["name"], msg["text"]]
                        continue
                    if pending:
                        self.publish_stream(pending[0], pending[1], silent)
                        pending = None
                    if msg["type"] == "done":
                        # What follows belongs to the next cell.
                        self._rep_buf = "".join(rest + "\n" for rest in lines[i + 1:]) + self._rep_buf
                        self._drain(out, err, silent)
                        return reply or self.ok()
                    reply = self._handle(msg, silent)
                if pending:
                    self.publish_stream(pending[0], pending[1], silent)
            if self._rep.eof:
                break
        # The driver ended in the middle of the cell.
        self._drain(out, err, silent)
        rc = proc.wait()
        self._close()
        name = self.process_name
        desc = f"{name} was killed by signal {-rc}" if rc < 0 else f"{name} exited with status {rc}"
        return self.publish_error("Error", desc,
                                  [desc + "; a new process starts for the next cell (its state is lost)"], silent)

    def _drain(self, out, err, silent):
        """Forwards what the driver wrote before its reply."""
        while True:
            fds = [s.fd for s in (out, err) if not s.eof]
            ready = self.wait_readable(fds, 0) if fds else []
            if not ready:
                return
            for fd in ready:
                s = out if fd == out.fd else err
                self.publish_stream(s.name, s.read(), silent)

    def _handle(self, msg, silent):
        if msg["type"] == "result":
            if not silent:
                self.send_response(self.iopub_socket, "execute_result", {
                    "execution_count": self.execution_count,
                    "data": {"text/plain": msg["text"]},
                    "metadata": {},
                })
            return None
        if msg["type"] == "error":
            return self.publish_error(msg["ename"], msg["evalue"], msg["traceback"], silent)
        return None

    def do_shutdown(self, restart):
        self._close()
        return {"status": "ok", "restart": restart}
