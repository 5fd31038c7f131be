package node

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"cube/internal/store"
)

// Every state is recorded under a name stateOf reads back as it, given
// the record fields that state keeps: records outlive the binary.
func TestStateRoundTripsThroughRecord(t *testing.T) {
	for s, rec := range map[state]store.Sandbox{
		stateCreating:     {},
		stateRunning:      {ContainerID: "c"},
		statePaused:       {ContainerID: "c"},
		stateWritingOut:   {ContainerID: "c", PauseImageTarget: "/d/pause"},
		statePausedOnDisk: {PauseImage: "/d/pause"},
		stateResuming:     {PauseImage: "/d/pause"},
		stateDeleting:     {},
	} {
		recordAs(&rec, s)
		if got, ok := stateOf(&rec); !ok || got != s {
			t.Errorf("%v stored as %q/%q reads back as %v (ok %v)", s, rec.State, rec.Pause, got, ok)
		}
	}
	if _, ok := stateOf(&store.Sandbox{State: "pausing"}); ok {
		t.Error("a name no version writes reads as a state")
	}
}

// Each state is stored as itself: a record is read as the state written
// into it, not as what its other fields suggest, and a record going
// through the store comes back in it.
func TestStateIsStoredAsItself(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, s := range []state{stateCreating, stateRunning, statePaused, stateWritingOut, statePausedOnDisk, stateResuming, stateDeleting} {
		rec := &store.Sandbox{ID: "sb-" + strconv.Itoa(int(s))}
		recordAs(rec, s)
		if got, ok := stateOf(rec); !ok || got != s {
			t.Errorf("%v without the fields it keeps reads as %v (ok %v)", s, got, ok)
		}
		if err := st.Sandboxes().Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
		back, err := st.Sandboxes().Get(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := stateOf(back); !ok || got != s {
			t.Errorf("%v read back from the store as %v (ok %v)", s, got, ok)
		}
		if back.PausedOnDisk() != (s == statePausedOnDisk) {
			t.Errorf("%v read back PausedOnDisk %v", s, back.PausedOnDisk())
		}
	}
	// A sandbox moving to another node is, for the record, still paused
	// on disk where it is.
	rec := &store.Sandbox{}
	recordAs(rec, stateMoving)
	if got, ok := stateOf(rec); !ok || got != statePausedOnDisk || !rec.PausedOnDisk() {
		t.Errorf("moving is recorded as %v (ok %v)", got, ok)
	}
	// Leaving a paused state leaves no paused state behind.
	rec = &store.Sandbox{}
	recordAs(rec, stateWritingOut)
	recordAs(rec, stateRunning)
	if rec.Pause != "" {
		t.Errorf("running after writing out: Pause %q", rec.Pause)
	}
}
