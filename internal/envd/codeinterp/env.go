package codeinterp

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// envName is what a variable name must look like to be set in every
// language's kernel without quoting trouble.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validateEnv(env map[string]string) error {
	for k, v := range env {
		if !envName.MatchString(k) {
			return fmt.Errorf("invalid environment variable name %q", k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("environment variable %s contains a NUL byte", k)
		}
	}
	return nil
}

// envCode writes the kernel-language code that changes the environment of
// a running kernel. Per-call variables are saved before and put back after
// the execution, so they are visible to that execution only.
type envCode interface {
	set(env map[string]string) string  // set without saving
	push(env map[string]string) string // save current values, then set
	pop(keys []string) string          // restore what push saved
}

// envCodeFor returns the env writer for a kernel language, or nil when Cube
// does not know how to change that language's environment.
func envCodeFor(language string) envCode {
	switch language {
	case "python":
		return pythonEnv{}
	case "bash":
		return bashEnv{}
	case "javascript", "typescript":
		return jsEnv{}
	case "r":
		return rEnv{}
	case "java":
		return javaEnv{}
	}
	return nil
}

func sortedKeys(env map[string]string) []string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// jsonString quotes s as a JSON string, which is also a valid string
// literal in Python, JavaScript and R.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func jsonObject(env map[string]string) string {
	b, _ := json.Marshal(env)
	return string(b)
}

// pythonEnv binds no names in the user's namespace: everything goes through
// __import__ and the saved values hang off the os module.
type pythonEnv struct{}

func (pythonEnv) set(env map[string]string) string {
	return "__import__('os').environ.update(" + jsonObject(env) + ")"
}

func (pythonEnv) push(env map[string]string) string {
	return "(lambda o, e: (setattr(o, '_cube_saved_env', {k: o.environ.get(k) for k in e}), o.environ.update(e)))(__import__('os'), " + jsonObject(env) + ")"
}

func (pythonEnv) pop([]string) string {
	return "(lambda o: [o.environ.pop(k, None) if v is None else o.environ.__setitem__(k, v) for k, v in o.__dict__.pop('_cube_saved_env', {}).items()])(__import__('os'))"
}

type bashEnv struct{}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (bashEnv) set(env map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	return b.String()
}

func (bashEnv) push(env map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "if [ -n \"${%[1]s+x}\" ]; then __cube_saved_%[1]s=\"$%[1]s\"; else unset __cube_saved_%[1]s; fi\nexport %[1]s=%[2]s\n", k, shellQuote(env[k]))
	}
	return b.String()
}

func (bashEnv) pop(keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "if [ -n \"${__cube_saved_%[1]s+x}\" ]; then export %[1]s=\"$__cube_saved_%[1]s\"; unset __cube_saved_%[1]s; else unset %[1]s; fi\n", k)
	}
	return b.String()
}

type jsEnv struct{}

func (jsEnv) set(env map[string]string) string {
	return "Object.assign(process.env, " + jsonObject(env) + ");"
}

func (jsEnv) push(env map[string]string) string {
	return "globalThis.__cubeSavedEnv = Object.fromEntries(Object.keys(" + jsonObject(env) + ").map(k => [k, process.env[k]])); Object.assign(process.env, " + jsonObject(env) + ");"
}

func (jsEnv) pop([]string) string {
	return "for (const [k, v] of Object.entries(globalThis.__cubeSavedEnv || {})) { if (v === undefined) delete process.env[k]; else process.env[k] = v; } delete globalThis.__cubeSavedEnv;"
}

type rEnv struct{}

func (rEnv) set(env map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "Sys.setenv(%s = %s)\n", k, jsonString(env[k]))
	}
	return b.String()
}

func (rEnv) push(env map[string]string) string {
	var b strings.Builder
	b.WriteString(".cube_saved_env <- Sys.getenv(c(")
	for i, k := range sortedKeys(env) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(jsonString(k))
	}
	b.WriteString("), unset = NA, names = TRUE)\n") // named even for one variable, which pop iterates over
	b.WriteString(rEnv{}.set(env))
	return b.String()
}

func (rEnv) pop([]string) string {
	return "for (.k in names(.cube_saved_env)) { if (is.na(.cube_saved_env[[.k]])) Sys.unsetenv(.k) else do.call(Sys.setenv, setNames(list(.cube_saved_env[[.k]]), .k)) }\nrm(.cube_saved_env, .k)\n"
}

// javaEnv writes environment variables as system properties, which is how
// E2B's Java kernel shows them (a JVM cannot change its own environment).
// Each snippet is one statement, so JShell compiles it once, and declares
// nothing in the user's namespace: push keeps a variable's previous value
// in the property cube.saved-env.NAME until pop puts it back.
type javaEnv struct{}

// javaString quotes s as a Java string literal. Control characters are
// octal escapes: a \u escape would be decoded before the literal is
// lexed, so \u000a would end the line inside it.
func javaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\%03o", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// javaPairs is a String[][] literal of the variables, sorted by name.
func javaPairs(env map[string]string) string {
	var b strings.Builder
	b.WriteString("new String[][] {")
	for i, k := range sortedKeys(env) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{%s, %s}", javaString(k), javaString(env[k]))
	}
	b.WriteString("}")
	return b.String()
}

func (javaEnv) set(env map[string]string) string {
	return "for (String[] cubeKv : " + javaPairs(env) + ") System.setProperty(cubeKv[0], cubeKv[1]);"
}

func (javaEnv) push(env map[string]string) string {
	return "for (String[] cubeKv : " + javaPairs(env) + ") { String cubeOld = System.getProperty(cubeKv[0]); " +
		"if (cubeOld != null) System.setProperty(\"cube.saved-env.\" + cubeKv[0], cubeOld); System.setProperty(cubeKv[0], cubeKv[1]); }"
}

func (javaEnv) pop(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = javaString(k)
	}
	return "for (String cubeK : new String[] {" + strings.Join(quoted, ", ") + "}) { String cubeOld = System.clearProperty(\"cube.saved-env.\" + cubeK); " +
		"if (cubeOld == null) System.clearProperty(cubeK); else System.setProperty(cubeK, cubeOld); }"
}
