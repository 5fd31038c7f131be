"""The Java kernel: one JVM per kernel running CubeJShell (CubeJShell.java,
compiled by the image build into cube-jshell.jar), which evaluates cells
with the JDK's JShell; _node.py's kernel drives it over the same kind of
pipes as node. The JVM starts with the first cell, so a sandbox whose
code never asks for Java pays nothing for it.

Requests are a header line "SILENT LENGTH" and the cell's UTF-8 bytes (the
JDK has no JSON reader); replies are JSON lines as from driver.js, and
also carry what cells print to System.out and System.err, a stream line per
flush, so each print is a stream message of its own as with E2B's Java
kernel (IJava): println's text, then its line break.
"""

import os
import shutil

from ipykernel.kernelapp import IPKernelApp

from ._node import NodeKernel

HERE = os.path.dirname(os.path.abspath(__file__))
# The image's trimmed Java runtime (jlink), else a JDK on PATH.
RUNTIME = "/usr/local/lib/cube-java"
DRIVER_JAR = os.path.join(HERE, "cube-jshell.jar")

# Options that keep a cell JVM small and quick to start: one GC thread, no
# hsperfdata file in /tmp, UTF-8 output whatever the locale says; the JVM's
# own warnings go to stderr, never into a cell's stdout.
JVM_OPTIONS = [
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
    "-Dfile.encoding=UTF-8",
    "-Dsun.stdout.encoding=UTF-8",
    "-Dsun.stderr.encoding=UTF-8",
]


def java_command():
    """The java launcher and its options, or None when there is no Java."""
    java = os.environ.get("CUBE_JAVA") or os.path.join(RUNTIME, "bin", "java")
    if not os.access(java, os.X_OK):
        java = shutil.which("java")
    if not java:
        return None
    cmd = [java] + JVM_OPTIONS
    # The class data archive the image build dumps after a warm-up run:
    # JShell's compiler classes load from it, mapped, instead of parsed.
    archive = os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "cube-jshell.jsa")
    if os.path.isfile(archive):
        cmd.append("-XX:SharedArchiveFile=" + archive)
    return cmd


class JavaKernel(NodeKernel):
    implementation = "cube-java"
    language = "java"
    language_info = {
        "name": "java",
        "mimetype": "text/x-java-source",
        "file_extension": ".java",
        "codemirror_mode": "text/x-java",
    }
    banner = "Java kernel (Cube, JShell)"
    process_name = "java"

    def command(self, req_fd, rep_fd):
        jar = os.environ.get("CUBE_JSHELL_JAR") or DRIVER_JAR
        return java_command() + ["-cp", jar, "CubeJShell", str(req_fd), str(rep_fd)]

    def encode_request(self, code, silent):
        data = code.encode("utf-8", "surrogatepass")
        return f"{int(bool(silent))} {len(data)}\n".encode() + data

    def do_execute(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False):
        if code.strip() and java_command() is None:
            return self.publish_error("JavaNotInstalled", "no java runtime was found",
                                      [f"no java runtime in {RUNTIME} or on PATH; install a JDK (17 or later) in the template"], silent)
        return super().do_execute(code, silent, store_history, user_expressions, allow_stdin)


if __name__ == "__main__":
    IPKernelApp.launch_instance(kernel_class=JavaKernel)
