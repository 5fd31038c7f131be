package node

import "testing"

func TestProcessRecords(t *testing.T) {
	console := []byte(`time=2026-12-02T15:00:00.5Z level=INFO msg="envd serving" addr=:49983
time=2026-12-02T15:00:01Z level=INFO msg="process started" pid=7 cmd=/bin/bash user=user pty=false
time=2026-12-02T15:00:02Z level=INFO msg="process exited" pid=7 cmd=/bin/bash exit_code=3 status="exit status 3"
garbage line msg="process started
`)
	got := processRecords(console)
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
