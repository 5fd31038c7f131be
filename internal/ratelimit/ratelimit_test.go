package ratelimit

import (
	"testing"
	"time"
)

func TestBurstThenWait(t *testing.T) {
	l := New[string](1, 2, 0)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	for i := 0; i < 2; i++ {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d within the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != time.Second {
		t.Errorf("third request: allowed=%v wait=%s, want refused with 1s to wait", ok, wait)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Error("another key shares the first key's bucket")
	}
	now = now.Add(time.Second)
	if ok, _ := l.Allow("a"); !ok {
		t.Error("refused after the bucket refilled")
	}
}

func TestNilAllowsEverything(t *testing.T) {
	l := New[string](0, 0, 0)
	if l != nil {
		t.Fatalf("New with no rate = %v, want nil", l)
	}
	for i := 0; i < 1000; i++ {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatal("nil limiter refused a request")
		}
	}
}

// Keys from the network cannot grow the set past its bound, and a key
// whose bucket is drained keeps it while refilled ones are shed.
func TestBoundedKeys(t *testing.T) {
	l := New[int](1, 2, 100)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	l.Allow(-1)
	l.Allow(-1) // -1 has drained its bucket
	for i := 0; i < 1000; i++ {
		l.Allow(i)
		if n := l.Len(); n > 100 {
			t.Fatalf("%d buckets held after %d keys, want at most 100", n, i+1)
		}
		if _, kept := l.keys[-1]; !kept {
			t.Fatalf("after %d keys the drained bucket of -1 was shed while refilled ones were there", i+1)
		}
		// Every other key's bucket refills; -1 keeps draining its own.
		now = now.Add(2 * time.Second)
		if ok, _ := l.Allow(-1); !ok {
			t.Fatalf("key -1 refused after a refill")
		}
		l.Allow(-1)
	}
}
