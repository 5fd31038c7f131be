package template

import (
	"bytes"
	"testing"
)

// BenchmarkLineWriter feeds step output in 64 KiB chunks of 64-byte lines,
// the way a chatty RUN step's output arrives from envd.
func BenchmarkLineWriter(b *testing.B) {
	chunk := bytes.Repeat(append(bytes.Repeat([]byte("x"), 63), '\n'), 1024)
	for b.Loop() {
		l := &buildLog{}
		w := &lineWriter{log: l, step: "1", level: "info"}
		w.Write(chunk)
	}
}

// BenchmarkStatusPoll reads a running build's log the way the SDK polls
// its status: all of it, then the new part, five times a second.
func BenchmarkStatusPoll(b *testing.B) {
	l := &buildLog{}
	for range maxOutputLines {
		l.add("info", "1", "a line of output")
	}
	for b.Loop() {
		_ = l.snapshot()[maxOutputLines-10:]
	}
}
