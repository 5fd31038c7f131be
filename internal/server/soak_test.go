package server_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"cube/internal/nodetest"
	"cube/internal/testenv"
)

// soakEnv names how many iterations TestSoakRandomKills runs; `make soak`
// sets it (200 by default), `make test` runs soakDefault of them.
const soakEnv = "CUBE_SOAK_ITERATIONS"

const soakDefault = 3

// soakBallast is written into each sandbox's memory-backed /tmp, so that
// its pause images and snapshots carry tens of megabytes and the kill
// lands inside a write of realistic length.
const soakBallast = 32 << 20

// soakOp is an operation a soak iteration kills the server during. fire
// starts it and returns the request to wait on; the kill lands at a
// uniformly random moment from 'from' to 'to' after the start, a window
// that covers the operation and any work it schedules (such as a pause's
// write-out) on this kind of machine.
type soakOp struct {
	name     string
	from, to time.Duration
	prep     func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox)
	fire     func(d *daemon, s *soakSandbox) (method, path string, body any)
	verify   func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox, acked bool, answer []byte)
}

// soakSandbox is a crash sandbox with a ballast file whose digest must
// survive.
type soakSandbox struct {
	crashSandbox
	ballast [sha256.Size]byte
}

// TestSoakRandomKills kills the server with SIGKILL at a random moment of
// a random operation (pause and its write-out, resume from disk,
// snapshot, delete, create), restarts it on the same data dir and checks
// what a user was told: an acknowledged operation took effect, an
// unacknowledged one either did or did not, never half; every sandbox
// that exists resumes with its file, its memory and its ballast; a resume
// that answers 201 reaches envd; and once everything is deleted and the
// server stopped, the host holds nothing of it. It prints "N passed, M
// failed" at the end.
func TestSoakRandomKills(t *testing.T) {
	testenv.RequireRoot(t)
	iterations := soakDefault
	if v := os.Getenv(soakEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", soakEnv, v)
		}
		iterations = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CUBE_SOAK_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	dataDir := t.TempDir()
	if err := os.Chmod(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	n := nodetest.New(t, nodetest.Options{DataDir: dataDir})
	n.TinyTemplate(t, "tiny")
	n.Close()
	prefix, cidr := nodetest.SlotRange()
	r := &crashRig{dataDir: dataDir, prefix: prefix, cidr: cidr.String(), addr: freeAddr(t)}

	ops := soakOps()
	passed, failed := 0, 0
	for i := range iterations {
		op := ops[rng.IntN(len(ops))]
		delay := op.from + time.Duration(rng.Int64N(int64(op.to-op.from)))
		name := fmt.Sprintf("%03d-%s-at-%dms", i, op.name, delay.Milliseconds())
		if t.Run(name, func(t *testing.T) { soakOnce(t, r, op, delay) }) {
			passed++
		} else {
			failed++
		}
	}
	fmt.Printf("soak: %d passed, %d failed (seed %d; %s=%d CUBE_SOAK_SEED=%d repeats it)\n",
		passed, failed, seed, soakEnv, iterations, seed)
}

// soakOnce runs one iteration on a server of its own over r's data dir.
func soakOnce(t *testing.T, r *crashRig, op soakOp, delay time.Duration) {
	d := r.start(t, "")
	s := newSoakSandbox(t, d)
	if op.prep != nil {
		op.prep(t, r, d, s)
	}
	method, path, body := op.fire(d, s)
	type answer struct {
		code int
		body []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		code, out, err := d.try(method, path, body)
		done <- answer{code, out, err}
	}()
	time.Sleep(delay)
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	a := <-done
	acked := a.err == nil && a.code/100 == 2
	if a.err == nil && !acked {
		t.Fatalf("%s %s answered %d before the kill: %s", method, path, a.code, a.body)
	}
	t.Logf("%s %s acknowledged: %v", method, path, acked)

	d = r.start(t, "")
	op.verify(t, r, d, s, acked, a.body)
	if !t.Failed() {
		soakEmpty(t, d)
	}
	r.stopClean(t, d)
	if left := dirNames(filepath.Join(r.dataDir, "sandboxes")); len(left) > 0 {
		t.Errorf("sandbox directories left after every sandbox was deleted: %v", left)
	}
	if left := dirNames(filepath.Join(r.dataDir, "snapshots")); len(left) > 0 {
		t.Errorf("snapshot directories left after every snapshot was deleted: %v", left)
	}
	if t.Failed() {
		t.Logf("server log of the restart:\n%s", d.logs.String())
	}
}

func newSoakSandbox(t *testing.T, d *daemon) *soakSandbox {
	t.Helper()
	s := &soakSandbox{crashSandbox: newCrashSandbox(t, d)}
	ballast := make([]byte, soakBallast)
	for i := range ballast {
		ballast[i] = byte(i*7 + i>>13)
	}
	copy(ballast, s.ID)
	s.ballast = sha256.Sum256(ballast)
	if code, out := d.envd(t, s.ID, s.Token, "POST", "/files?path=/tmp/ballast", ballast); code != 200 {
		t.Fatalf("upload ballast: %d %s", code, out)
	}
	return s
}

// checkAll asserts that sandbox id holds s's file, memory and ballast.
func (s *soakSandbox) checkAll(t *testing.T, d *daemon, id, token string) {
	t.Helper()
	s.check(t, d, id, token)
	code, out := d.envd(t, id, token, "GET", "/files?path=/tmp/ballast", nil)
	if code != 200 || sha256.Sum256([]byte(out)) != s.ballast {
		t.Errorf("ballast of %s: %d, %d bytes, digest differs from what was written", id, code, len(out))
	}
}

// soakState is the sandbox's state as the restarted server reports it,
// "" when it is not found.
func soakState(t *testing.T, d *daemon, id string) string {
	t.Helper()
	code, out := d.do(t, "GET", "/sandboxes/"+id, nil, nil)
	if code == 404 {
		return ""
	}
	var info struct{ State string }
	if code != 200 || json.Unmarshal(out, &info) != nil {
		t.Fatalf("get %s: %d %s", id, code, out)
	}
	return info.State
}

// soakResume resumes (or connects to) a sandbox that exists and checks
// everything it held: a 201 must mean a sandbox that answers.
func soakResume(t *testing.T, d *daemon, s *soakSandbox) {
	t.Helper()
	if code, out := d.do(t, "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}, nil); code/100 != 2 {
		t.Fatalf("connect after the restart: %d %s", code, out)
	}
	s.checkAll(t, d, s.ID, s.Token)
}

// soakWant fails unless state is one of want.
func soakWant(t *testing.T, what, state string, want ...string) {
	t.Helper()
	for _, w := range want {
		if state == w {
			return
		}
	}
	t.Fatalf("%s: state %q after the restart, want one of %q", what, state, want)
}

// soakOnDisk waits until a paused sandbox's write-out is complete.
func soakOnDisk(t *testing.T, r *crashRig, id string) {
	t.Helper()
	dir := filepath.Join(r.dataDir, "sandboxes", id)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		_, img := os.Stat(filepath.Join(dir, "pause", "checkpoint.img"))
		_, tmp := os.Stat(filepath.Join(dir, "pause.tmp"))
		if img == nil && os.IsNotExist(tmp) {
			// The record follows the rename; give it its moment.
			time.Sleep(300 * time.Millisecond)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("sandbox %s was never written to disk", id)
}

func soakOps() []soakOp {
	// r.start's --pause-write-delay is 2 s: the write-out starts then.
	pause := func(name string, from, to time.Duration) soakOp {
		return soakOp{
			name: name, from: from, to: to,
			fire: func(d *daemon, s *soakSandbox) (string, string, any) {
				return "POST", "/sandboxes/" + s.ID + "/pause", nil
			},
			verify: func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox, acked bool, _ []byte) {
				st := soakState(t, d, s.ID)
				if acked {
					soakWant(t, "acknowledged pause", st, "paused")
				} else {
					soakWant(t, "pause cut short", st, "paused", "running")
				}
				soakResume(t, d, s)
			},
		}
	}
	return []soakOp{
		pause("pause", 0, 150*time.Millisecond),
		pause("pause-write-out", 1900*time.Millisecond, 2700*time.Millisecond),
		{
			name: "resume-from-disk",
			from: 0, to: 500 * time.Millisecond,
			prep: func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox) {
				if code, out := d.do(t, "POST", "/sandboxes/"+s.ID+"/pause", nil, nil); code != 204 {
					t.Fatalf("pause: %d %s", code, out)
				}
				soakOnDisk(t, r, s.ID)
			},
			fire: func(d *daemon, s *soakSandbox) (string, string, any) {
				return "POST", "/sandboxes/" + s.ID + "/connect", map[string]any{"timeout": 600}
			},
			verify: func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox, acked bool, _ []byte) {
				st := soakState(t, d, s.ID)
				if acked {
					soakWant(t, "acknowledged resume", st, "running")
				} else {
					soakWant(t, "resume cut short", st, "paused", "running")
				}
				soakResume(t, d, s)
			},
		}, {
			name: "snapshot",
			from: 0, to: 500 * time.Millisecond,
			fire: func(d *daemon, s *soakSandbox) (string, string, any) {
				return "POST", "/sandboxes/" + s.ID + "/snapshots", map[string]any{}
			},
			verify: func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox, acked bool, answer []byte) {
				soakWant(t, "snapshot source", soakState(t, d, s.ID), "running")
				s.checkAll(t, d, s.ID, s.Token)
				code, body := d.do(t, "GET", "/snapshots?sandboxID="+s.ID, nil, nil)
				var snaps []struct{ SnapshotID string }
				if code != 200 || json.Unmarshal(body, &snaps) != nil {
					t.Fatalf("list snapshots: %d %s", code, body)
				}
				if acked {
					var taken struct{ SnapshotID string }
					json.Unmarshal(answer, &taken)
					if len(snaps) != 1 || snaps[0].SnapshotID != taken.SnapshotID {
						t.Fatalf("acknowledged snapshot %s: listed %s", taken.SnapshotID, body)
					}
				} else if len(snaps) > 1 {
					t.Fatalf("one snapshot cut short, %d listed: %s", len(snaps), body)
				}
				for _, snap := range snaps {
					code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": snap.SnapshotID, "timeout": 600}, nil)
					if code != 201 {
						t.Fatalf("create from snapshot %s: %d %s", snap.SnapshotID, code, body)
					}
					var child struct{ SandboxID, EnvdAccessToken string }
					json.Unmarshal(body, &child)
					s.checkAll(t, d, child.SandboxID, child.EnvdAccessToken)
				}
			},
		}, {
			name: "delete",
			from: 0, to: 200 * time.Millisecond,
			fire: func(d *daemon, s *soakSandbox) (string, string, any) {
				return "DELETE", "/sandboxes/" + s.ID, nil
			},
			verify: func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox, acked bool, _ []byte) {
				st := soakState(t, d, s.ID)
				if acked {
					soakWant(t, "acknowledged delete", st, "")
					return
				}
				soakWant(t, "delete cut short", st, "", "running")
				if st != "" {
					s.checkAll(t, d, s.ID, s.Token)
				}
			},
		}, {
			name: "create",
			from: 0, to: 500 * time.Millisecond,
			fire: func(d *daemon, s *soakSandbox) (string, string, any) {
				return "POST", "/sandboxes", map[string]any{"templateID": "tiny", "timeout": 600}
			},
			verify: func(t *testing.T, r *crashRig, d *daemon, s *soakSandbox, acked bool, answer []byte) {
				soakWant(t, "sandbox beside the create", soakState(t, d, s.ID), "running")
				s.checkAll(t, d, s.ID, s.Token)
				if !acked {
					return
				}
				var made struct{ SandboxID string }
				json.Unmarshal(answer, &made)
				soakWant(t, "acknowledged create", soakState(t, d, made.SandboxID), "running")
				holderToken(t, d, made.SandboxID)
			},
		}}
}

// soakEmpty deletes every sandbox and snapshot the server holds.
func soakEmpty(t *testing.T, d *daemon) {
	t.Helper()
	code, body := d.do(t, "GET", "/snapshots", nil, nil)
	var snaps []struct{ SnapshotID string }
	if code != 200 || json.Unmarshal(body, &snaps) != nil {
		t.Fatalf("list snapshots: %d %s", code, body)
	}
	for _, snap := range snaps {
		if code, out := d.do(t, "DELETE", "/templates/"+snap.SnapshotID, nil, nil); code/100 != 2 {
			t.Errorf("delete snapshot %s: %d %s", snap.SnapshotID, code, out)
		}
	}
	if code, body := d.do(t, "GET", "/v2/sandboxes?state=running,paused", nil, nil); code == 200 && !bytes.Equal(bytes.TrimSpace(body), []byte("[]")) {
		var list []struct{ SandboxID string }
		json.Unmarshal(body, &list)
		for _, sb := range list {
			if code, out := d.do(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); code/100 != 2 {
				t.Errorf("delete sandbox %s: %d %s", sb.SandboxID, code, out)
			}
		}
	}
}
