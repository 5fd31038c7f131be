"""A bash kernel: one persistent bash process per kernel.

Each cell is written to a file and sourced by that bash, with stdin from
/dev/null, so variables, functions, aliases and the working directory carry
over to the next cell. After the cell, bash prints a marker line with the
exit status of the cell's last command on stdout and a marker on stderr;
everything before the markers is the cell's output. A non-zero status is
reported as an error (ename "Error", evalue the status). If bash exits (the
cell ran `exit`, or an interrupt killed it) a fresh one starts for the next
cell.

An interrupt (SIGINT to the kernel's process group) stops the running
command, and a trap returns from the sourced cell with status 130: the
shell and its state survive.
"""

import os
import secrets
import signal
import subprocess
import tempfile

from ipykernel.kernelapp import IPKernelApp

from ._child import ChildKernel, Stream


class BashKernel(ChildKernel):
    implementation = "cube-bash"
    implementation_version = "1.0"
    language = "bash"
    language_version = "5"
    language_info = {
        "name": "bash",
        "mimetype": "text/x-sh",
        "file_extension": ".sh",
        "codemirror_mode": "shell",
        "pygments_lexer": "bash",
    }
    banner = "Bash kernel (Cube)"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._dir = tempfile.mkdtemp(prefix="cube-bash-")
        self._cell = os.path.join(self._dir, "cell.sh")
        self._mark = "__CUBE_CELL_END_" + secrets.token_hex(8)
        self._proc = None

    def _bash(self):
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                for f in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                    f.close()
            self._proc = subprocess.Popen(
                ["bash", "--noprofile", "--norc"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # The kernel's SIGINT disposition (ignored by ipykernel) must
                # not be inherited: bash and its commands get the default.
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            # On an interrupt, leave the cell being sourced; between cells
            # (an interrupt may be repeated) the return fails quietly.
            self._proc.stdin.write(b"trap 'return 130 2>/dev/null' INT\n")
            self._proc.stdin.flush()
        return self._proc

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False):
        if not code.strip():
            return self.ok()
        with open(self._cell, "w") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        proc = self._bash()
        sep = "\n" + self._mark
        driver = (
            f"source {self._cell} </dev/null\n"
            f"__cube_rc=$?; printf '\\n%s %d\\n' {self._mark} \"$__cube_rc\"; printf '\\n%s\\n' {self._mark} >&2; unset __cube_rc\n"
        )
        previous = self.ignore_sigint()
        try:
            try:
                proc.stdin.write(driver.encode())
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            status = self._pump(proc, sep, silent)
        finally:
            signal.signal(signal.SIGINT, previous)
        if status is None:
            rc = proc.wait()
            self._proc = None
            if rc < 0:
                desc = f"bash was killed by signal {-rc} ({signal.Signals(-rc).name})"
            else:
                desc = f"bash exited with status {rc}"
            return self.publish_error("Error", str(rc if rc >= 0 else 128 - rc),
                                      [desc + "; a new shell starts for the next cell (its state is lost)"], silent)
        if status != 0:
            return self.publish_error("Error", str(status), [f"Error: exit status {status}"], silent)
        return self.ok()

    def _pump(self, proc, sep, silent):
        """Forwards output until both markers arrive; returns the status, or
        None if bash ended first."""
        streams = {proc.stdout.fileno(): Stream("stdout", proc.stdout.fileno()),
                   proc.stderr.fileno(): Stream("stderr", proc.stderr.fileno())}
        pending = {fd: "" for fd in streams}
        done = {}
        while len(done) < 2:
            open_fds = [fd for fd, s in streams.items() if not s.eof and fd not in done]
            if not open_fds:
                break
            ready = self.wait_readable(open_fds, timeout=0.2)
            if not ready:
                # Quiet for a moment (a command still running): what is
                # held goes out, but a final newline, which may begin the
                # marker of a stream written unbuffered (stderr).
                for fd, buf in pending.items():
                    cut = len(buf) - 1 if buf.endswith("\n") else len(buf)
                    if cut > 0 and self._mark not in buf:
                        self.publish_stream(streams[fd].name, buf[:cut], silent)
                        pending[fd] = buf[cut:]
                continue
            for fd in ready:
                s = streams[fd]
                pending[fd] += s.read()
                buf = pending[fd]
                i = buf.find(sep)
                if i >= 0:
                    end = buf.find("\n", i + len(sep))
                    if end < 0:
                        self.publish_stream(s.name, buf[:i], silent)
                        pending[fd] = buf[i:]
                        continue
                    self.publish_stream(s.name, buf[:i], silent)
                    done[fd] = buf[i + len(sep):end].strip()
                    pending[fd] = ""
                    continue
                # Hold back a tail that may be the start of the marker
                # (stderr is unbuffered, so the marker's newline may come
                # alone), and with it the rest of its line, so that a line
                # goes out with its newline.
                keep = 0
                j = buf.rfind("\n")
                if j >= 0 and sep.startswith(buf[j:]):
                    keep = len(buf) - (buf.rfind("\n", 0, j) + 1)
                self.publish_stream(s.name, buf[: len(buf) - keep], silent)
                pending[fd] = buf[len(buf) - keep:]
                if s.eof:
                    self.publish_stream(s.name, pending[fd], silent)
                    pending[fd] = ""
        if len(done) < 2:
            return None
        try:
            return int(done[proc.stdout.fileno()])
        except ValueError:
            return 1

    def do_shutdown(self, restart):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        try:
            os.remove(self._cell)
        except OSError:
            pass
        try:
            os.rmdir(self._dir)
        except OSError:
            pass
        return {"status": "ok", "restart": restart}


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=BashKernel)
