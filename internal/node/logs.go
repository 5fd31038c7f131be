package node

import (
	"bufio"
	"bytes"
	"context"
	"sort"
	"strings"
	"time"

	"cube/internal/api"
)

// SandboxLogs returns a sandbox's log: the node's lifecycle events and the
// process start and exit records envd writes to its console, oldest first.
func (n *Node) SandboxLogs(ctx context.Context, sandboxID string) ([]api.LogEntry, error) {
	if _, err := n.record(ctx, sandboxID); err != nil {
		return nil, err
	}
	ev, err := n.store.Events(ctx, sandboxID, 0, 10000)
	if err != nil {
		return nil, err
	}
	out := make([]api.LogEntry, 0, len(ev))
	for _, e := range ev {
		out = append(out, api.LogEntry{Time: e.Time, Level: api.LogLevel(e.Level), Message: e.Message})
	}
	n.mu.Lock()
	l := n.live[sandboxID]
	n.mu.Unlock()
	if l != nil {
		if console, err := l.sb.Console(); err == nil {
			out = append(out, processRecords(console)...)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}

// processRecords picks envd's process records out of its console output
// (log/slog text lines such as
// `time=... level=INFO msg="process exited" pid=7 exit_code=0`).
func processRecords(console []byte) []api.LogEntry {
	var out []api.LogEntry
	sc := bufio.NewScanner(bytes.NewReader(console))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="process `) {
			continue
		}
		kv := parseLogfmt(line)
		if kv["msg"] != "process started" && kv["msg"] != "process exited" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, kv["time"])
		if err != nil {
			continue
		}
		e := api.LogEntry{Time: t, Level: api.LevelInfo, Message: kv["msg"], Fields: map[string]string{}}
		for k, v := range kv {
			if k != "time" && k != "level" && k != "msg" {
				e.Fields[k] = v
			}
		}
		out = append(out, e)
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
