package sim

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"sync"
)

// logCounter is the nodes' logger: records at Warn and above go to w, and
// every record at Info and above is counted by level and message, so a
// run reports what the nodes complained of (heartbeats that failed, too
// many clients) without anyone reading the log.
type logCounter struct {
	mu     sync.Mutex
	counts map[logKey]int
	next   slog.Handler
}

type logKey struct {
	level slog.Level
	msg   string
}

func newLogCounter(w io.Writer) *logCounter {
	return &logCounter{counts: map[logKey]int{}, next: slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})}
}

// logger is a logger counting into c.
func (c *logCounter) logger() *slog.Logger { return slog.New(countingHandler{c: c, next: c.next}) }

type countingHandler struct {
	c    *logCounter
	next slog.Handler
}

func (h countingHandler) Enabled(ctx context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.c.mu.Lock()
	h.c.counts[logKey{r.Level, r.Message}]++
	h.c.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{c: h.c, next: h.next.WithAttrs(as)}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{c: h.c, next: h.next.WithGroup(name)}
}

// LogCount is how often the nodes logged one message at one level.
type LogCount struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// snapshot returns the counts of warnings and errors, most frequent first.
func (c *logCounter) snapshot() map[logKey]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[logKey]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// warnings is what was counted since before (nil: since the start), Warn
// and above, most frequent first.
func warnings(now, before map[logKey]int) []LogCount {
	var out []LogCount
	for k, v := range now {
		if k.level < slog.LevelWarn {
			continue
		}
		if n := v - before[k]; n > 0 {
			out = append(out, LogCount{Level: k.level.String(), Message: k.msg, Count: n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Message < out[j].Message
	})
	return out
}
