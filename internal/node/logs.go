package node

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"time"

	"cube/internal/cube"
)

// maxProcessRecords caps the process records one logs answer takes from
// a sandbox's console, the newest kept. It stays below the API's default
// page (1000 entries), so a sandbox that prints forged records in bulk
// cannot push the node's own events out of that page.
const maxProcessRecords = 500

// SourceField names, in a process record's fields, where it came from:
// SourceSandbox, set by the node, whatever the line said. The node's own
// events carry no fields, so the two never pass for each other.
const (
	SourceField   = "source"
	SourceSandbox = "sandbox"
)

// SandboxLogs returns a sandbox's log: the node's lifecycle events (kept
// in the store, out of the sandbox's reach) and the process start and
// exit records envd writes to its console, oldest first. The console is
// the sandbox's own output, so what it says is only believed so far: the
// runtime keeps just its newest part, records from before the sandbox
// existed or from the future are dropped, and at most maxProcessRecords
// are taken.
func (n *Node) SandboxLogs(ctx context.Context, sandboxID string) ([]cube.LogEntry, error) {
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	ev, err := n.store.Events(ctx, sandboxID, 0, 10000)
	if err != nil {
		return nil, err
	}
	out := make([]cube.LogEntry, 0, len(ev))
	for _, e := range ev {
		out = append(out, cube.LogEntry{Time: e.Time, Level: cube.LogLevel(e.Level), Message: e.Message})
	}
	var box *container
	n.mu.Lock()
	if sb := n.sandboxes[sandboxID]; sb != nil {
		box = sb.box
	}
	n.mu.Unlock()
	if box != nil {
		if console, err := box.sb.Console(); err == nil {
			out = append(out, processRecords(console, rec.CreatedAt, time.Now())...)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}

// processRecords picks envd's process records out of its console output
// (log/slog text lines such as
// `time=... level=INFO msg="process exited" pid=7 exit_code=0`): the
// newest maxProcessRecords of those timed between from and to, each
// marked as the sandbox's.
func processRecords(console []byte, from, to time.Time) []cube.LogEntry {
	var out []cube.LogEntry
	// Line by line, however long: a scanner would stop at the first line
	// over its limit, and the sandbox chooses the lines.
	for b := range bytes.Lines(console) {
		if !bytes.Contains(b, []byte(`msg="process `)) {
			continue
		}
		kv := parseLogfmt(strings.TrimRight(string(b), "\r\n"))
		if kv["msg"] != "process started" && kv["msg"] != "process exited" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, kv["time"])
		if err != nil || t.Before(from) || t.After(to) {
			continue
		}
		e := cube.LogEntry{Time: t, Level: cube.LevelInfo, Message: kv["msg"], Fields: map[string]string{}}
		for k, v := range kv {
			if k != "time" && k != "level" && k != "msg" {
				e.Fields[k] = v
			}
		}
		e.Fields[SourceField] = SourceSandbox
		out = append(out, e)
	}
	if len(out) > maxProcessRecords {
		out = out[len(out)-maxProcessRecords:]
	}
	return out
}

// parseLogfmt splits `k=v k2="quoted v"` into a map.
func parseLogfmt(line string) map[string]string {
	kv := map[string]string{}
	for len(line) > 0 {
		line = strings.TrimLeft(line, " ")
		eq := strings.IndexByte(line, '=')
		if eq <= 0 {
			break
		}
		key := line[:eq]
		line = line[eq+1:]
		var val string
		if strings.HasPrefix(line, `"`) {
			end := 1
			for end < len(line) && (line[end] != '"' || line[end-1] == '\\') {
				end++
			}
			val = strings.ReplaceAll(line[1:min(end, len(line))], `\"`, `"`)
			line = line[min(end+1, len(line)):]
		} else {
			sp := strings.IndexByte(line, ' ')
			if sp < 0 {
				sp = len(line)
			}
			val, line = line[:sp], line[sp:]
		}
		kv[key] = val
	}
	return kv
}
