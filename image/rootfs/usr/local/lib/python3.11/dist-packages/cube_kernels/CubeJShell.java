// Cube's Java cell driver, run by cube_kernels (java.py) as
// `java -cp DIR CubeJShell REQUEST_FD REPLY_FD`; the image build compiles it
// and records the classes a first cell loads in a class data archive
// (REQUEST_FD and REPLY_FD may be file paths for that run).
//
// Cells arrive on REQUEST_FD as a header line "SILENT LENGTH" (SILENT is 0 or
// 1, LENGTH the UTF-8 byte count of the code) followed by the code. For each
// cell the driver writes JSON lines to REPLY_FD: at most one
// {"type":"result","text":...} or {"type":"error","ename","evalue","traceback"},
// then {"type":"done"}. Cells run through the JDK's JShell in this JVM (its
// local execution engine). What a cell prints to System.out and System.err
// goes to REPLY_FD too, as {"type":"stream","name":"stdout"|"stderr",
// "text":...}, one line per flush: both are PrintStreams that flush at
// every write, as E2B's Java kernel (IJava) sets them up, so each print
// arrives as a stream message of its own and println's text comes before
// its line break, as there. Both are flushed before "done". Whatever
// writes to the process's own stdout and stderr (the JVM itself, a child
// process that inherits them) is forwarded by the kernel as it reads it.
//
// A cell may hold several snippets (declarations, statements, expressions);
// they run in order until one fails. The value of a last expression is the
// result: a String as its text, anything else as JShell shows it. Variables,
// methods, classes and imports stay for later cells. Environment variables
// become system properties when the driver starts, as E2B's Java kernel
// does; SIGINT stops the running cell.

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.ExpressionSnippet;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;
import jdk.jshell.VarSnippet;
import jdk.jshell.execution.LocalExecutionControl;
import jdk.jshell.spi.ExecutionControl;
import jdk.jshell.spi.ExecutionControlProvider;
import jdk.jshell.spi.ExecutionEnv;

public final class CubeJShell {
    /** What a new context can use without importing, as in the jshell tool. */
    private static final String[] IMPORTS = {
        "java.io.*", "java.math.*", "java.net.*", "java.nio.file.*", "java.util.*",
        "java.util.concurrent.*", "java.util.function.*", "java.util.regex.*", "java.util.stream.*",
    };

    /**
     * The local engine, which also hands out a variable's value as the object
     * itself: JShell's own text for a String is a quoted Java literal, and a
     * result shows a String as its plain text.
     */
    static final class Control extends LocalExecutionControl {
        Object lastValue;

        @Override
        public String varValue(String className, String varName)
                throws ExecutionControl.RunException, ExecutionControl.EngineTerminationException,
                ExecutionControl.InternalException {
            lastValue = null;
            try {
                Field f = findClass(className).getDeclaredField(varName);
                f.setAccessible(true);
                lastValue = f.get(null);
            } catch (ReflectiveOperationException | RuntimeException e) {
                // JShell's own lookup below reports the problem.
            }
            return super.varValue(className, varName);
        }
    }

    /**
     * System.out or System.err of the cells: what is written is kept until a
     * flush, which sends it as one stream reply. A flush that ends inside a
     * UTF-8 sequence keeps that sequence's bytes for the next one.
     */
    static final class ChunkStream extends OutputStream {
        private final String name;
        private final ByteArrayOutputStream pending = new ByteArrayOutputStream();

        ChunkStream(String name) {
            this.name = name;
        }

        @Override
        public synchronized void write(int b) {
            pending.write(b);
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) {
            pending.write(b, off, len);
        }

        @Override
        public synchronized void flush() throws IOException {
            byte[] bytes = pending.toByteArray();
            int end = completeUtf8(bytes);
            if (end == 0) {
                return;
            }
            pending.reset();
            pending.write(bytes, end, bytes.length - end);
            reply("{\"type\":\"stream\",\"name\":" + json(name) + ",\"text\":"
                    + json(new String(bytes, 0, end, StandardCharsets.UTF_8)) + "}");
        }

        /** How many of b's bytes end on a whole UTF-8 character. */
        static int completeUtf8(byte[] b) {
            for (int i = b.length - 1; i >= 0 && i >= b.length - 3; i--) {
                int c = b[i] & 0xff;
                if (c < 0x80) {
                    return b.length;
                }
                if (c >= 0xc0) { // the last character starts here
                    int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
                    return i + len <= b.length ? b.length : i;
                }
            }
            return b.length; // not UTF-8: sent as it is
        }
    }

    /**
     * The cells' System.out and System.err. Being a subclass makes println
     * print its text and then the line break, as JDK 11 (E2B's) does for
     * every PrintStream, where JDK 17's own class writes both at once.
     */
    static final class CellPrintStream extends PrintStream {
        CellPrintStream(String name) {
            super(new ChunkStream(name), true, StandardCharsets.UTF_8);
        }
    }

    /** Where replies go; shared by the driver and the cells' output streams. */
    private static OutputStream replies;

    private final JShell shell;
    private final Control control;
    private volatile boolean interrupted;
    private volatile boolean running;
    private volatile long cellNumber; // which cell runs, so a stop never outlives its cell

    private CubeJShell() {
        Control[] made = new Control[1];
        ExecutionControlProvider provider = new ExecutionControlProvider() {
            @Override
            public String name() {
                return "cube-local";
            }

            @Override
            public ExecutionControl generate(ExecutionEnv env, Map<String, String> parameters) {
                made[0] = new Control();
                return made[0];
            }
        };
        shell = JShell.builder()
                .executionEngine(provider, Map.of())
                .in(InputStream.nullInputStream())
                .out(System.out)
                .err(System.err)
                .build();
        // The engine is made when the shell starts, which build() does.
        control = made[0];
        for (String imp : IMPORTS) {
            shell.eval("import " + imp + ";");
        }
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: CubeJShell REQUEST_FD|FILE REPLY_FD|FILE");
            System.exit(2);
        }
        // Environment variables are visible as system properties too; a
        // property Java sets itself is never replaced (their names have dots,
        // which environment names cannot have).
        System.getenv().forEach((k, v) -> {
            if (System.getProperty(k) == null) {
                System.setProperty(k, v);
            }
        });
        // Buffered: FileInputStream.readNBytes seeks, which a pipe cannot.
        InputStream requests = new BufferedInputStream(new FileInputStream(path(args[0])));
        replies = new FileOutputStream(path(args[1]));
        System.setOut(new CellPrintStream("stdout"));
        System.setErr(new CellPrintStream("stderr"));
        CubeJShell driver = new CubeJShell();
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), sig -> driver.interrupt());
        while (true) {
            String header = readLine(requests);
            if (header == null) {
                return; // the kernel closed the pipe
            }
            String[] parts = header.trim().split(" ");
            boolean silent = parts[0].equals("1");
            byte[] code = requests.readNBytes(Integer.parseInt(parts[1]));
            driver.runCell(new String(code, StandardCharsets.UTF_8), silent);
        }
    }

    /** A descriptor number's path, or a file's: the image build warms the driver up on files. */
    private static String path(String arg) {
        return arg.matches("[0-9]+") ? "/proc/self/fd/" + arg : arg;
    }

    /**
     * Stops the cell. JShell can only stop code that runs, and the signal may
     * come while the next snippet compiles, so the stop is repeated until the
     * cell ends; runSnippets starts no snippet after it.
     */
    private void interrupt() {
        if (!running || interrupted) {
            return;
        }
        interrupted = true;
        long cell = cellNumber;
        Thread stopper = new Thread(() -> {
            while (running && cellNumber == cell) {
                shell.stop();
                try {
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "cube-interrupt");
        stopper.setDaemon(true);
        stopper.start();
    }

    private void runCell(String code, boolean silent) throws IOException {
        cellNumber++;
        interrupted = false;
        running = true;
        try {
            String result = runSnippets(code);
            if (result != null && !silent) {
                reply("{\"type\":\"result\",\"text\":" + json(result) + "}");
            }
        } catch (CellError e) {
            reply("{\"type\":\"error\",\"ename\":" + json(e.name) + ",\"evalue\":" + json(e.value)
                    + ",\"traceback\":" + jsonArray(e.traceback) + "}");
        } finally {
            running = false;
            System.out.flush();
            System.err.flush();
            reply("{\"type\":\"done\"}");
        }
    }

    /** A cell's failure, reported as a Jupyter error. */
    static final class CellError extends Exception {
        final String name;
        final String value;
        final List<String> traceback;

        CellError(String name, String value, List<String> traceback) {
            super(name + ": " + value, null, false, false);
            this.name = name;
            this.value = value;
            this.traceback = traceback;
        }
    }

    /** Runs the snippets of a cell in order; returns the last one's value to show, or null. */
    private String runSnippets(String code) throws CellError {
        SourceCodeAnalysis analysis = shell.sourceCodeAnalysis();
        String rest = code;
        String shown = null;
        while (!rest.isBlank()) {
            if (interrupted) {
                throw interruptedError();
            }
            int offset = code.length() - rest.length();
            SourceCodeAnalysis.CompletionInfo info = analysis.analyzeCompletion(rest);
            if (info.completeness() == SourceCodeAnalysis.Completeness.EMPTY) {
                break; // only comments are left
            }
            String source;
            if (info.completeness().isComplete()) {
                source = info.source();
                rest = info.remaining();
            } else {
                source = rest; // incomplete: JShell's diagnostics say what is missing
                rest = "";
            }
            // Where the snippet starts in the cell, for diagnostics' lines.
            int start = offset + leadingSpace(code, offset) - leadingSpace(source, 0);
            shown = runSnippet(source, code, start);
        }
        if (interrupted) {
            throw interruptedError();
        }
        return shown;
    }

    private static CellError interruptedError() {
        return new CellError("Interrupted", "The execution was interrupted",
                List.of("Interrupted: the execution was interrupted; what ran before it is kept"));
    }

    private String runSnippet(String source, String code, int start) throws CellError {
        String shown = null;
        for (SnippetEvent ev : shell.eval(source)) {
            if (ev.causeSnippet() != null) {
                continue; // a dependent snippet updated in passing
            }
            Snippet snip = ev.snippet();
            if (ev.status() == Snippet.Status.REJECTED) {
                throw compileError(snip, code, start);
            }
            JShellException ex = ev.exception();
            if (ex instanceof EvalException) {
                throw runtimeError((EvalException) ex);
            }
            if (ex instanceof UnresolvedReferenceException) {
                String missing = String.join(", ", shell.unresolvedDependencies(
                        ((UnresolvedReferenceException) ex).getSnippet()).toList());
                String msg = "this code uses " + missing + ", which is not declared yet; declare it, then run the code again";
                throw new CellError("UnresolvedReferenceException", msg, List.of("UnresolvedReferenceException: " + msg));
            }
            if (ex != null) {
                throw new CellError(ex.getClass().getSimpleName(), String.valueOf(ex.getMessage()),
                        List.of(ex.getClass().getSimpleName() + ": " + ex.getMessage()));
            }
            shown = display(snip, ev.value());
        }
        return shown;
    }

    /** The text of an expression's value, or null for other snippets. */
    private String display(Snippet snip, String value) {
        VarSnippet var = null;
        if (snip.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND && snip instanceof VarSnippet) {
            var = (VarSnippet) snip;
        } else if (snip.subKind() == Snippet.SubKind.VAR_VALUE_SUBKIND && snip instanceof ExpressionSnippet) {
            String name = ((ExpressionSnippet) snip).name();
            var = shell.variables().filter(v -> v.name().equals(name) && shell.status(v).isActive())
                    .reduce((a, b) -> b).orElse(null);
            if (var == null) {
                return value;
            }
        } else {
            return null;
        }
        try {
            String text = shell.varValue(var);
            return control.lastValue instanceof String ? (String) control.lastValue : text;
        } catch (IllegalArgumentException | IllegalStateException e) {
            return value;
        }
    }

    private CellError compileError(Snippet snip, String code, int start) {
        List<String> lines = new ArrayList<>();
        String first = null;
        for (Diag d : shell.diagnostics(snip).toList()) {
            if (!d.isError()) {
                continue;
            }
            // A cell's code has no class of its own to name.
            String msg = d.getMessage(Locale.ROOT).replaceAll("\\n\\s*location: class\\s*$", "");
            if (first == null) {
                first = msg;
            }
            long pos = d.getStartPosition() >= 0 ? d.getStartPosition() : d.getPosition();
            int at = (int) Math.min(code.length(), start + Math.max(0, pos));
            int line = 1;
            for (int i = 0; i < at; i++) {
                if (code.charAt(i) == '\n') {
                    line++;
                }
            }
            int lineStart = code.lastIndexOf('\n', at - 1) + 1;
            int lineEnd = code.indexOf('\n', at);
            lines.add("line " + line + ": error: " + msg);
            lines.add("    " + code.substring(lineStart, lineEnd < 0 ? code.length() : lineEnd));
            lines.add("    " + " ".repeat(at - lineStart) + "^");
        }
        if (first == null) {
            first = "the code does not compile";
            lines.add(first);
        }
        return new CellError("CompilationException", first, lines);
    }

    private static int leadingSpace(String code, int from) {
        int i = from;
        while (i < code.length() && Character.isWhitespace(code.charAt(i))) {
            i++;
        }
        return i - from;
    }

    private static CellError runtimeError(EvalException ex) {
        List<String> lines = new ArrayList<>();
        String prefix = "";
        for (Throwable t = ex; t != null; t = t.getCause()) {
            String cls = t instanceof EvalException ? ((EvalException) t).getExceptionClassName() : t.getClass().getName();
            lines.add(prefix + cls + (t.getMessage() == null ? "" : ": " + t.getMessage()));
            for (StackTraceElement el : t.getStackTrace()) {
                String c = el.getClassName();
                if (c.startsWith("jdk.internal.reflect.") || c.startsWith("java.lang.reflect.") || c.startsWith("jdk.jshell.")) {
                    break; // JShell's own frames below the cell
                }
                lines.add("\tat " + el);
            }
            prefix = "Caused by: ";
        }
        return new CellError(ex.getExceptionClassName(), ex.getMessage() == null ? "" : ex.getMessage(), lines);
    }

    private static synchronized void reply(String line) throws IOException {
        replies.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        replies.flush();
    }

    private static String readLine(InputStream in) throws IOException {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        int b;
        while ((b = in.read()) != '\n') {
            if (b < 0) {
                return buf.size() == 0 ? null : buf.toString(StandardCharsets.UTF_8);
            }
            buf.write(b);
        }
        return buf.toString(StandardCharsets.UTF_8);
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20 || Character.isSurrogate(c)) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    private static String jsonArray(List<String> items) {
        StringBuilder b = new StringBuilder("[");
        for (String s : items) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append(json(s));
        }
        return b.append(']').toString();
    }
}
