"""Tests of the Java kernel (cube_kernels.java and CubeJShell.java) as
Jupyter clients see it: the kernel runs from the image's sources, with the
driver compiled here by the JDK's javac and jar (make deps installs
openjdk-17-jdk-headless), and is driven over its real ZeroMQ channels.

Run from the repository root with Debian's python3:
python3 -m unittest discover -s image/tests -p 'test_java*'
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import unittest

from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES = os.path.normpath(os.path.join(HERE, "..", "rootfs", "usr", "local", "lib", "python3.11", "dist-packages"))
DRIVER_SOURCE = os.path.join(PACKAGES, "cube_kernels", "CubeJShell.java")
# Debian's JDK 17 is what the image's runtime is made from; other JDKs on
# PATH may differ (from 20 on, a cell can no longer be stopped).
JDK17 = "/usr/lib/jvm/java-17-openjdk-amd64/bin"
TIMEOUT = 120


def jdk_tool(name):
    path = os.path.join(JDK17, name)
    if os.access(path, os.X_OK):
        return path
    found = shutil.which(name)
    if not found:
        raise AssertionError(f"{name} is not installed (make deps installs openjdk-17-jdk-headless)")
    return found


class JavaKernelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        classes = os.path.join(cls.tmp.name, "classes")
        jar = os.path.join(cls.tmp.name, "cube-jshell.jar")
        subprocess.run([jdk_tool("javac"), "-nowarn", "-d", classes, DRIVER_SOURCE], check=True, capture_output=True)
        subprocess.run([jdk_tool("jar"), "--create", "--file", jar, "-C", classes, "."], check=True)
        specs = os.path.join(cls.tmp.name, "kernels")
        os.makedirs(os.path.join(specs, "java"))
        with open(os.path.join(specs, "java", "kernel.json"), "w") as f:
            json.dump({"argv": [sys.executable, "-m", "cube_kernels.java", "-f", "{connection_file}"],
                       "display_name": "Java", "language": "java"}, f)
        cls.cwd = os.path.join(cls.tmp.name, "work")
        os.makedirs(cls.cwd)
        env = dict(os.environ, PYTHONPATH=PACKAGES, CUBE_JSHELL_JAR=jar, CUBE_JAVA=jdk_tool("java"),
                   CUBE_KERNEL_TEST_VAR="from the environment", HOME=cls.tmp.name)
        cls.km = KernelManager(kernel_name="java", kernel_spec_manager=KernelSpecManager(kernel_dirs=[specs]))
        cls.km.start_kernel(env=env, cwd=cls.cwd)
        cls.kc = cls.km.client()
        cls.kc.start_channels()
        cls.kc.wait_for_ready(timeout=TIMEOUT)

    @classmethod
    def tearDownClass(cls):
        cls.kc.stop_channels()
        cls.km.shutdown_kernel(now=True)
        cls.tmp.cleanup()

    def run_cell(self, code, silent=False, interrupt_when=None):
        """Runs a cell; returns its reply content and its iopub messages
        (stream, execute_result, error) as (type, content) pairs."""
        # As Cube's agent sends cells: a failed cell does not abort the
        # ones after it (ipykernel would, for a moment, with stop_on_error).
        msg_id = self.kc.execute(code, silent=silent, stop_on_error=False)
        out = []
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=TIMEOUT)
            except queue.Empty:
                self.fail(f"no message from the kernel for {TIMEOUT} s running {code!r}")
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind in ("stream", "execute_result", "error"):
                out.append((kind, content))
            if interrupt_when and interrupt_when(kind, content):
                self.km.interrupt_kernel()
        while True:  # replies to earlier requests (kernel_info at start) come first
            reply = self.kc.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"], out

    def result_of(self, code):
        reply, out = self.run_cell(code)
        self.assertEqual(reply["status"], "ok", out)
        results = [c["data"]["text/plain"] for kind, c in out if kind == "execute_result"]
        self.assertEqual(len(results), 1, out)
        return results[0]

    def stream(self, out, name):
        return "".join(c["text"] for kind, c in out if kind == "stream" and c["name"] == name)

    def test_values_as_text_strings_without_quotes(self):
        self.assertEqual(self.result_of("1 + 1"), "2")
        self.assertEqual(self.result_of('"say \\"hi\\"\\n"'), 'say "hi"\n')
        self.assertEqual(self.result_of("List.of(1, 2)"), "[1, 2]")
        self.assertEqual(self.result_of("new int[] {1, 2}"), "int[2] { 1, 2 }")
        self.assertEqual(self.result_of("'c'"), "'c'")

    def test_state_is_kept_between_cells(self):
        reply, out = self.run_cell('int counter = 41;\nString greet(String who) { return "hi " + who; }')
        self.assertEqual((reply["status"], out), ("ok", []))
        self.assertEqual(self.result_of("counter + 1"), "42")
        self.assertEqual(self.result_of('greet("there")'), "hi there")
        self.assertEqual(self.result_of('String named = greet("x");\nnamed'), "hi x")

    def test_output_is_streamed_and_has_no_result(self):
        reply, out = self.run_cell('System.out.println("to out");\nSystem.err.print("to err");\nSystem.out.print("no newline");')
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(self.stream(out, "stdout"), "to out\nno newline")
        self.assertEqual(self.stream(out, "stderr"), "to err")
        self.assertFalse([c for kind, c in out if kind == "execute_result"])

    def test_each_print_is_a_stream_message_as_from_ijava(self):
        # E2B's test_java_kernel reads stdout[0] == "Hello, World!": IJava's
        # System.out flushes at every write, println's text then its break.
        reply, out = self.run_cell('System.out.println("Hello, World!")')
        self.assertEqual(reply["status"], "ok")
        self.assertEqual([(c["name"], c["text"]) for kind, c in out if kind == "stream"],
                         [("stdout", "Hello, World!"), ("stdout", "\n")])
        reply, out = self.run_cell('System.out.print("a");\nSystem.err.print("b");\nSystem.out.print(1 + 1);')
        self.assertEqual([(c["name"], c["text"]) for kind, c in out if kind == "stream"],
                         [("stdout", "a"), ("stderr", "b"), ("stdout", "2")])
        # A character whose bytes come in two writes is sent whole.
        reply, out = self.run_cell('System.out.write(0xc3);\nSystem.out.flush();\nSystem.out.write(0xa9);\nSystem.out.flush();')
        self.assertEqual(reply["status"], "ok", out)
        self.assertEqual([c["text"] for kind, c in out if kind == "stream"], ["\u00e9"])

    def test_compile_error_names_the_line(self):
        reply, out = self.run_cell("int fine = 1;\nint broken = fine +\n    undeclaredName;")
        self.assertEqual(reply["status"], "error")
        errors = [c for kind, c in out if kind == "error"]
        self.assertEqual(len(errors), 1, out)
        self.assertEqual(errors[0]["ename"], "CompilationException")
        self.assertIn("cannot find symbol", errors[0]["evalue"])
        trace = "\n".join(errors[0]["traceback"])
        self.assertIn("line 3: error: cannot find symbol", trace)
        self.assertIn("undeclaredName", trace)
        # The snippet before the broken one ran.
        self.assertEqual(self.result_of("fine"), "1")

    def test_exception_is_an_error_with_its_stack(self):
        reply, out = self.run_cell('int before = 7;\nInteger.parseInt("not a number");\nint after = 8;')
        self.assertEqual(reply["status"], "error")
        errors = [c for kind, c in out if kind == "error"]
        self.assertEqual(errors[0]["ename"], "java.lang.NumberFormatException")
        self.assertIn('For input string: "not a number"', errors[0]["evalue"])
        self.assertEqual(errors[0]["traceback"][0], 'java.lang.NumberFormatException: For input string: "not a number"')
        self.assertTrue(any("Integer.parseInt" in line for line in errors[0]["traceback"]), errors[0]["traceback"])
        self.assertEqual(self.result_of("before"), "7")
        reply, out = self.run_cell("after")
        self.assertEqual(reply["status"], "error", "the cell stopped at the exception")

    def test_environment_and_working_directory_are_system_properties(self):
        self.assertEqual(self.result_of('System.getProperty("CUBE_KERNEL_TEST_VAR")'), "from the environment")
        self.assertEqual(self.result_of('System.getProperty("user.dir")'), self.cwd)

    def test_silent_cell_runs_without_output(self):
        reply, out = self.run_cell('System.setProperty("cube.test.silent", "set"); 5', silent=True)
        self.assertEqual((reply["status"], out), ("ok", []))
        self.assertEqual(self.result_of('System.getProperty("cube.test.silent")'), "set")

    def test_interrupt_stops_the_cell_and_keeps_state(self):
        self.run_cell('String kept = "still here";')
        reply, out = self.run_cell('System.out.println("looping");\nwhile (true) { }',
                                   interrupt_when=lambda kind, c: kind == "stream" and "looping" in c["text"])
        self.assertEqual(reply["status"], "error")
        self.assertEqual([c["ename"] for kind, c in out if kind == "error"], ["Interrupted"])
        self.assertEqual(self.result_of("kept"), "still here")

    def test_exit_starts_a_fresh_jvm(self):
        self.run_cell("int lost = 1;")
        reply, out = self.run_cell("System.exit(3);")
        self.assertEqual(reply["status"], "error")
        errors = [c for kind, c in out if kind == "error"]
        self.assertEqual(errors[0]["evalue"], "java exited with status 3")
        self.assertEqual(self.result_of("6 * 7"), "42")
        reply, out = self.run_cell("lost")
        self.assertEqual(reply["status"], "error", "variables went with the old JVM")


if __name__ == "__main__":
    unittest.main()
