package codeinterp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Java snippets are checked with the JDK's jshell tool (make deps
// installs openjdk-17-jdk-headless): the image's Java kernel runs them
// through the same JShell API. The values hold what a string literal must
// escape: quotes, backslashes, a backslash-u that must stay as typed, a
// line break and a control character.
func TestJavaEnvSetAndRestore(t *testing.T) {
	jshell, err := exec.LookPath("jshell")
	if err != nil {
		t.Fatalf("jshell is not installed (make deps installs openjdk-17-jdk-headless): %v", err)
	}
	j := javaEnv{}
	tricky := "it's \"x\" \\u0041 \\\n\x01é"
	vars := map[string]string{"CUBE_NEW": tricky, "CUBE_OLD": "override"}
	script := `System.setProperty("CUBE_OLD", "orig");` + "\n" +
		j.push(vars) + "\n" +
		`System.out.println(System.getProperty("CUBE_NEW").equals(` + javaString(tricky) + `) + "|" + System.getProperty("CUBE_OLD"));` + "\n" +
		j.pop(sortedKeys(vars)) + "\n" +
		`System.out.println(System.getProperty("CUBE_NEW", "unset") + "|" + System.getProperty("CUBE_OLD") + "|" + System.getProperties().stringPropertyNames().stream().filter(n -> n.startsWith("cube.")).count());` + "\n" +
		j.set(map[string]string{"CUBE_GLOBAL": "g'1"}) + "\n" +
		`System.out.println(System.getProperty("CUBE_GLOBAL"));` + "\n" +
		"/exit\n"
	file := filepath.Join(t.TempDir(), "env.jsh")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	// jshell keeps preferences under user.home (which Java takes from the
	// password database, not $HOME) and says so on stderr the first time;
	// the snippets' output is stdout alone.
	cmd := exec.Command(jshell, "-q", "-J-Duser.home="+t.TempDir(), "--execution", "local", file)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s%s", err, out, stderr.String())
	}
	want := "true|override\n" + "unset|orig|0\n" + "g'1\n"
	if string(out) != want {
		t.Fatalf("got %q, want %q\nscript:\n%s", out, want, script)
	}
}

func TestJavaString(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:       `"plain"`,
		`a"b\c`:       `"a\"b\\c"`,
		"l1\nl2\r\t":  `"l1\nl2\r\t"`,
		"\x01\x7f":    `"\001\177"`,
		`\u000a`:      `"\\u000a"`,
		"bad\xffutf8": "\"bad\uFFFDutf8\"",
		"é€😀":         `"é€😀"`,
	} {
		if got := javaString(in); got != want {
			t.Errorf("javaString(%q) = %s, want %s", in, got, want)
		}
	}
}
