package codeinterp

import (
	"os/exec"
	"testing"
)

// The bash snippets are checked with bash itself: a bash kernel runs them
// the same way.
func TestBashEnvSetAndRestore(t *testing.T) {
	b := bashEnv{}
	vars := map[string]string{"CUBE_NEW": "it's $HOME \"x\"\n", "CUBE_OLD": "override"}
	script := "export CUBE_OLD=orig\n" +
		b.push(vars) +
		`printf '%s|%s\n' "$CUBE_NEW" "$CUBE_OLD"` + "\n" +
		b.pop(sortedKeys(vars)) +
		`printf '%s|%s|%s\n' "${CUBE_NEW-unset}" "$CUBE_OLD" "$(env | grep -c __cube_saved_)"` + "\n" +
		b.set(map[string]string{"CUBE_GLOBAL": "g'1"}) +
		`printf '%s\n' "$CUBE_GLOBAL"`
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "it's $HOME \"x\"\n|override\nunset|orig|0\ng'1\n"
	if string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

func TestValidateEnv(t *testing.T) {
	for name, ok := range map[string]bool{"A": true, "_a1": true, "1A": false, "A-B": false, "A B": false, "": false, "A=B": false} {
		if err := validateEnv(map[string]string{name: "v"}); (err == nil) != ok {
			t.Errorf("validateEnv(%q) = %v", name, err)
		}
	}
	if validateEnv(map[string]string{"A": "a\x00b"}) == nil {
		t.Error("NUL byte in a value accepted")
	}
}

// The R snippets are checked with Rscript (r-base-core, which make deps
// installs): an R kernel (IRkernel) runs them the same way. One variable
// alone is the case where Sys.getenv returns an unnamed value unless asked
// for names.
func TestREnvSetAndRestore(t *testing.T) {
	if _, err := exec.LookPath("Rscript"); err != nil {
		t.Fatalf("Rscript is not installed (make deps installs r-base-core): %v", err)
	}
	r := rEnv{}
	for _, vars := range []map[string]string{
		{"CUBE_NEW": "it's $HOME \"x\"\n"},
		{"CUBE_NEW": "it's $HOME \"x\"\n", "CUBE_OLD": "override"},
	} {
		script := "Sys.setenv(CUBE_OLD = \"orig\")\n" +
			r.push(vars) +
			`cat(Sys.getenv("CUBE_NEW"), Sys.getenv("CUBE_OLD"), sep = "|"); cat("\n")` + "\n" +
			r.pop(sortedKeys(vars)) +
			`cat(Sys.getenv("CUBE_NEW", unset = "unset"), Sys.getenv("CUBE_OLD"), exists(".cube_saved_env"), sep = "|"); cat("\n")` + "\n"
		out, err := exec.Command("Rscript", "-e", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		old := "orig"
		if _, ok := vars["CUBE_OLD"]; ok {
			old = "override"
		}
		want := "it's $HOME \"x\"\n|" + old + "\nunset|orig|FALSE\n"
		if string(out) != want {
			t.Errorf("%d variables: got %q, want %q", len(vars), out, want)
		}
	}
}
