package node

import (
	"errors"
	"slices"
	"testing"
)

func TestCleanupUndoesNewestFirstAndJoinsErrors(t *testing.T) {
	var c cleanup
	var ran []int
	errA, errC := errors.New("a"), errors.New("c")
	c.Add(func() error { ran = append(ran, 1); return errA })
	c.Add(func() error { ran = append(ran, 2); return nil })
	c.Add(func() error { ran = append(ran, 3); return errC })
	err := c.Clean()
	if !slices.Equal(ran, []int{3, 2, 1}) {
		t.Fatalf("ran %v, want newest first", ran)
	}
	if !errors.Is(err, errA) || !errors.Is(err, errC) {
		t.Fatalf("err = %v, want both failures", err)
	}
	if err := c.Clean(); err != nil || len(ran) != 3 {
		t.Fatalf("a second Clean ran undos again: %v %v", ran, err)
	}
}

func TestCleanupReleaseKeepsEverything(t *testing.T) {
	var c cleanup
	c.Add(func() error { t.Fatal("undo ran after Release"); return nil })
	c.Release()
	if err := c.Clean(); err != nil {
		t.Fatal(err)
	}
}
