package server_test

import (
	"os/exec"
	"strings"
	"testing"

	"cube/internal/nodetest"
	"cube/internal/testenv"
)

// cli runs cubemastercli against d with d's key, and nothing else from
// the caller's environment.
func (d *daemon) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(testenv.Bin(t, "cubemastercli"), args...)
	cmd.Env = testenv.Environ("CUBE_API_URL="+d.url, "CUBE_API_KEY="+apiKey)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCallerEnvironmentIgnored runs the CLI the way every server test
// does, from a shell like an E2B user's: E2B_API_KEY names another
// account and CUBE_API_URL another server. The tests' calls must still
// reach their own server with their own key.
func TestCallerEnvironmentIgnored(t *testing.T) {
	testenv.RequireRoot(t)
	t.Setenv("E2B_API_KEY", "e2b_key_of_the_callers_own_account_0000000")
	t.Setenv("CUBE_API_KEY", "e2b_another_key_from_the_callers_shell_000")
	t.Setenv("CUBE_API_URL", "http://127.0.0.1:1")
	prefix, cidr := nodetest.SlotRange()
	d := startDaemon(t, t.TempDir(), prefix, cidr.String(), freeAddr(t))
	out, err := d.cli(t, "list")
	if err != nil {
		t.Fatalf("cubemastercli list with the caller's E2B_API_KEY set: %v\n%s", err, out)
	}
	if strings.Contains(out, "401") {
		t.Fatalf("the caller's key reached the server: %s", out)
	}
}
