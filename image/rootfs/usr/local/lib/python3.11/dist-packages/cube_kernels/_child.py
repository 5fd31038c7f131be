"""Plumbing shared by the wrapper kernels: a child process whose stdout and
stderr are read without blocking and forwarded as Jupyter stream messages."""

import codecs
import os
import select
import signal

from ipykernel.kernelbase import Kernel


class Stream:
    """One output pipe of the child: decodes UTF-8 incrementally."""

    def __init__(self, name, fd):
        self.name = name
        self.fd = fd
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.eof = False

    def read(self):
        """Text read from the pipe now ('' at end of file)."""
        data = os.read(self.fd, 65536)
        if not data:
            self.eof = True
            return self.decoder.decode(b"", final=True)
        return self.decoder.decode(data)


class ChildKernel(Kernel):
    """A kernel whose cells run in a child process."""

    def publish_stream(self, name, text, silent):
        if text and not silent:
            self.send_response(self.iopub_socket, "stream", {"name": name, "text": text})

    def publish_error(self, ename, evalue, traceback, silent):
        content = {"ename": ename, "evalue": evalue, "traceback": traceback}
        if not silent:
            self.send_response(self.iopub_socket, "error", content)
        return dict(content, status="error", execution_count=self.execution_count)

    def ok(self):
        return {
            "status": "ok",
            "execution_count": self.execution_count,
            "payload": [],
            "user_expressions": {},
        }

    def ignore_sigint(self):
        """The interrupt goes to the kernel's whole process group, so the
        child gets it directly; the wrapper itself carries on reading."""
        return signal.signal(signal.SIGINT, lambda *_: None)

    @staticmethod
    def wait_readable(fds, timeout=None):
        while True:
            try:
                return select.select(fds, [], [], timeout)[0]
            except InterruptedError:
                continue

    def do_complete(self, code, cursor_pos):
        return {"status": "ok", "matches": [], "cursor_start": cursor_pos,
                "cursor_end": cursor_pos, "metadata": {}}

    def do_is_complete(self, code):
        return {"status": "unknown"}
