package node_test

import (
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/node/nodefake"
	"cube/internal/store"
)

// A sandbox frozen in memory, one being written out when the server died,
// and one paused on disk are each recorded as the paused state they are
// in, and a node started again on the store reads each as that state:
// the frozen one is adopted frozen and resumes by a thaw, the write-out
// whose image is complete is finished, and the one on disk stays there.
// Records as an older version writes them (the paused state left out)
// are read the same.
func TestFakePausedStatesReadBackAfterARestart(t *testing.T) {
	for _, older := range []bool{false, true} {
		t.Run(map[bool]string{false: "stored", true: "older-records"}[older], func(t *testing.T) {
			n := newFake(t, nodefake.Options{}) // written out only after an hour
			frozen := fakeCreate(t, n, cube.CreateRequest{})
			writing := fakeCreate(t, n, cube.CreateRequest{})
			onDisk := fakeCreate(t, n, cube.CreateRequest{})
			frozenC, _ := served(t, n, frozen.ID)
			writingC, _ := served(t, n, writing.ID)
			if err := n.PauseSandbox(fctx(t), frozen.ID, true); err != nil {
				t.Fatal(err)
			}
			if err := n.PauseSandbox(fctx(t), onDisk.ID, false); err != nil { // files only: on disk at once
				t.Fatal(err)
			}
			// The image is complete under its name; the record still
			// names it as in flight.
			crashAt(t, fault.PauseAfterRename, func() { n.PauseSandbox(fctx(t), writing.ID, false) })

			wantRecorded := func(when string, want map[string]store.PauseState) {
				t.Helper()
				for id, p := range want {
					rec := record(t, n, id)
					if rec.State != store.Paused || rec.Pause != p || rec.PausedOnDisk() != (p == store.PauseOnDisk) {
						t.Errorf("%s: %s is recorded %s/%s (on disk %v), want paused/%s", when, id, rec.State, rec.Pause, rec.PausedOnDisk(), p)
					}
				}
			}
			wantRecorded("before the restart", map[string]store.PauseState{
				frozen.ID: store.PauseFrozen, writing.ID: store.PauseWritingOut, onDisk.ID: store.PauseOnDisk})
			if older {
				for _, id := range []string{frozen.ID, writing.ID, onDisk.ID} {
					if err := n.Store.Sandboxes().Update(fctx(t), id, func(r *store.Sandbox) error { r.Pause = ""; return nil }); err != nil {
						t.Fatal(err)
					}
				}
			}

			n = n.Restart(t)
			wantRecorded("after the restart", map[string]store.PauseState{
				frozen.ID: store.PauseFrozen, writing.ID: store.PauseOnDisk, onDisk.ID: store.PauseOnDisk})
			for _, id := range []string{frozen.ID, writing.ID, onDisk.ID} {
				wantState(t, n, id, cube.StatePaused)
				if !n.Holds(id) {
					t.Fatalf("%s is not held after the restart", id)
				}
			}
			if rec := record(t, n, writing.ID); rec.PauseImageTarget != "" || rec.PauseImage == "" || rec.ContainerID != "" {
				t.Fatalf("the finished write-out is recorded as %+v", rec)
			}
			if s := n.Runtime.Container(frozenC).State(); s != nodefake.Paused {
				t.Fatalf("the frozen sandbox's container is %q after the restart", s)
			}
			if c := n.Runtime.Container(writingC); c != nil {
				t.Fatalf("the container of the sandbox written out is still there (%s)", c.State())
			}
			listed, err := n.ListSandboxes(fctx(t), cube.ListFilter{})
			if err != nil || len(listed) != 3 {
				t.Fatalf("listed %d sandboxes (%v), want the three", len(listed), err)
			}

			for _, id := range []string{frozen.ID, writing.ID, onDisk.ID} {
				if _, resumed, err := n.ConnectSandbox(fctx(t), id, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
					t.Fatalf("connect %s = %v, %v", id, resumed, err)
				}
				wantState(t, n, id, cube.StateRunning)
			}
			if c, _ := served(t, n, frozen.ID); c != frozenC {
				t.Fatalf("the frozen sandbox resumed into %s, not by a thaw of %s", c, frozenC)
			}
			for _, id := range []string{writing.ID, onDisk.ID} {
				if c, _ := served(t, n, id); c == writingC || c == frozenC {
					t.Fatalf("%s resumed into %s, not restored from its image", id, c)
				}
				if rec := record(t, n, id); rec.State != store.Running || rec.Pause != "" {
					t.Fatalf("%s resumed is recorded %s/%q", id, rec.State, rec.Pause)
				}
			}
		})
	}
}
