package node

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var (
	logsFrom = time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	logsTo   = logsFrom.Add(time.Hour)
)

func TestLogsProcessRecords(t *testing.T) {
	console := []byte(`time=2026-12-02T15:00:00.5Z level=INFO msg="envd serving" addr=:49983
time=2026-12-02T15:00:01Z level=INFO msg="process started" pid=7 cmd=/bin/bash user=user pty=false
time=2026-12-02T15:00:02Z level=INFO msg="process exited" pid=7 cmd=/bin/bash exit_code=3 status="exit status 3"
garbage line msg="process started
`)
	got := processRecords(console, logsFrom, logsTo)
	if len(got) != 2 {
		t.Fatalf("got %d records: %+v", len(got), got)
	}
	if got[0].Message != "process started" || got[0].Fields["pid"] != "7" || got[0].Fields["user"] != "user" {
		t.Fatalf("start record %+v", got[0])
	}
	if got[1].Fields["exit_code"] != "3" || got[1].Fields["status"] != "exit status 3" {
		t.Fatalf("exit record %+v", got[1])
	}
}

// A sandbox writes its console itself: it may print records in bulk, with
// any time, any fields, and lines of any length. What the logs take from
// it is bounded, marked as the sandbox's, and within the sandbox's life.
func TestLogsBoundWhatTheSandboxWrites(t *testing.T) {
	var b strings.Builder
	record := func(at time.Time, pid int, extra string) {
		fmt.Fprintf(&b, "time=%s level=INFO msg=\"process started\" pid=%d%s\n", at.Format(time.RFC3339Nano), pid, extra)
	}
	b.WriteString(strings.Repeat("x", 3<<20) + "\n") // longer than any scanner buffer
	for i := 1; i < 2*maxProcessRecords; i++ {
		record(logsFrom.Add(time.Duration(i)*time.Millisecond), i, "")
	}
	record(logsFrom.Add(-time.Minute), -1, "") // before the sandbox existed
	record(logsTo.Add(time.Minute), -2, "")    // from the future
	record(logsTo, 2*maxProcessRecords, " source=node")
	got := processRecords([]byte(b.String()), logsFrom, logsTo)
	if len(got) != maxProcessRecords {
		t.Fatalf("took %d records from the console, want the newest %d", len(got), maxProcessRecords)
	}
	if first, last := got[0].Fields["pid"], got[len(got)-1].Fields["pid"]; first != fmt.Sprint(maxProcessRecords+1) || last != fmt.Sprint(2*maxProcessRecords) {
		t.Errorf("kept pids %s to %s, want the newest, %d to %d", first, last, maxProcessRecords+1, 2*maxProcessRecords)
	}
	for _, e := range got {
		if e.Time.Before(logsFrom) || e.Time.After(logsTo) {
			t.Errorf("record timed %s, outside the sandbox's life", e.Time)
		}
		if e.Fields[SourceField] != SourceSandbox {
			t.Errorf("record %+v is not marked as the sandbox's", e)
		}
	}
}
