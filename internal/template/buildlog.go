package template

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"cube/internal/cube"
)

// buildLog is the log of one build: kept in memory while the build runs
// and appended to a file, so it reads back after the server restarts.
type buildLog struct {
	mu      sync.Mutex
	entries []cube.BuildLogEntry
	f       *os.File
	// output and outputBytes count the lines and bytes of step output;
	// past maxOutputLines or maxOutputBytes they are dropped, so a step
	// that prints without end cannot exhaust the server's memory or disk.
	output      int
	outputBytes int
	capped      bool
}

// maxOutputLines and maxOutputBytes bound the step output one build's
// log keeps (a line is at most 8 KiB, see lineWriter).
const (
	maxOutputLines = 20000
	maxOutputBytes = 16 << 20
)

// logLevels orders the levels a query filters by.
var logLevels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// logKeep is how long the log of a finished build is kept.
const logKeep = 7 * 24 * time.Hour

func (b *Builder) logPath(buildID string) string {
	return filepath.Join(b.cfg.DataDir, "buildlogs", buildID+".jsonl")
}

// newBuildLog opens the log of a build for appending.
func (b *Builder) newBuildLog(buildID string) *buildLog {
	l := &buildLog{}
	if err := os.MkdirAll(filepath.Dir(b.logPath(buildID)), 0o700); err == nil {
		l.f, _ = os.OpenFile(b.logPath(buildID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	return l
}

// add appends one entry; a message of several lines is several entries.
func (l *buildLog) add(level, step, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		e := cube.BuildLogEntry{Time: time.Now().UTC(), Level: level, Message: strings.TrimRight(line, "\r"), Step: step}
		l.entries = append(l.entries, e)
		if l.f != nil {
			data, _ := json.Marshal(logRecord{e.Time, e.Level, e.Message, e.Step})
			l.f.Write(append(data, '\n'))
		}
	}
}

func (l *buildLog) infof(step, msg string) { l.add("info", step, msg) }

// snapshot returns the entries so far. Entries are only ever appended,
// never changed, so the slice is shared rather than copied (a status poll
// would otherwise copy the whole log each time); its capacity is capped so
// that no caller's append can write into the log.
func (l *buildLog) snapshot() []cube.BuildLogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[:len(l.entries):len(l.entries)]
}

func (l *buildLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

type logRecord struct {
	Time    time.Time `json:"t"`
	Level   string    `json:"l"`
	Message string    `json:"m"`
	Step    string    `json:"s,omitempty"`
}

// readLog reads a build's log from its file: for builds that ended
// before the server started.
func (b *Builder) readLog(buildID string) []cube.BuildLogEntry {
	f, err := os.Open(b.logPath(buildID))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []cube.BuildLogEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r logRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			out = append(out, cube.BuildLogEntry{Time: r.Time, Level: r.Level, Message: r.Message, Step: r.Step})
		}
	}
	return out
}

// pruneLogs removes the logs of builds that ended long ago.
func (b *Builder) pruneLogs() {
	dir := filepath.Join(b.cfg.DataDir, "buildlogs")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > logKeep {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// lineWriter turns a process's output into log entries, one per line.
type lineWriter struct {
	log   *buildLog
	step  string
	level string
	buf   []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.log.addOutput(w.level, w.step, string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	// A line without an end is cut rather than held without bound.
	if len(w.buf) > 8<<10 {
		w.flush()
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.log.addOutput(w.level, w.step, string(w.buf))
		w.buf = nil
	}
}

// addOutput adds a line of a step's output, while the log has room.
func (l *buildLog) addOutput(level, step, line string) {
	l.mu.Lock()
	l.output++
	l.outputBytes += len(line)
	keep := !l.capped && l.output <= maxOutputLines && l.outputBytes <= maxOutputBytes
	notice := !keep && !l.capped
	l.capped = l.capped || !keep
	l.mu.Unlock()
	switch {
	case keep:
		l.add(level, step, line)
	case notice:
		l.add("warn", step, "the build's output passed "+strconv.Itoa(maxOutputLines)+" lines or "+strconv.Itoa(maxOutputBytes>>20)+" MB: the rest is not kept")
	}
}
