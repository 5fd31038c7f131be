package node

import (
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
		rec.State = s.stored()
		if got, ok := stateOf(&rec); !ok || got != s {
			t.Errorf("%v stored as %q reads back as %v (ok %v)", s, rec.State, got, ok)
		}
	}
	if _, ok := stateOf(&store.Sandbox{State: "pausing"}); ok {
		t.Error("a name no version writes reads as a state")
	}
}
