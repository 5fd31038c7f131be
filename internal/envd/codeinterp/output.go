package codeinterp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"cube/internal/envd/codeinterp/jupyter"
)

// keepaliveInterval is how long a stream may stay silent before a keepalive
// line is written. Writing is also how a vanished client gets noticed.
var keepaliveInterval = 5 * time.Second

// Line types of the /execute NDJSON stream.
const (
	lineStdout     = "stdout"
	lineStderr     = "stderr"
	lineResult     = "result"
	lineError      = "error"
	lineCount      = "number_of_executions"
	lineEnd        = "end_of_execution"
	lineKeepalive  = "keepalive"
	errKernelDied  = "DeadKernelError"
	errKernelStart = "KernelStartError"
)

type streamLine struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp string `json:"timestamp,omitempty"`
}

type errorLine struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

type countLine struct {
	Type           string `json:"type"`
	ExecutionCount int    `json:"execution_count"`
}

type typeLine struct {
	Type string `json:"type"`
}

// resultFields maps MIME types to the result line's named fields; every
// other MIME type of a bundle lands in "extra" under its own name.
var resultFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// structuredFields hold JSON values; the others are strings (images base64).
var structuredFields = map[string]bool{"json": true, "data": true, "chart": true}

// resultLine turns a MIME bundle into a result line. Absent formats are
// omitted rather than null, as the SDKs list a result's formats by presence.
func resultLine(data map[string]json.RawMessage, main bool) map[string]any {
	line := map[string]any{"type": lineResult, "is_main_result": main}
	extra := map[string]json.RawMessage{}
	for mime, raw := range data {
		field, ok := resultFields[mime]
		if !ok {
			extra[mime] = raw
			continue
		}
		if structuredFields[field] {
			line[field] = raw
			continue
		}
		s := mimeString(raw)
		if field == "text" {
			s = unquote(s)
		}
		line[field] = s
	}
	if len(extra) > 0 {
		line["extra"] = extra
	}
	return line
}

// mimeString reads a textual MIME value: a string, or (in notebooks
// written by some kernels) a list of lines.
func mimeString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, "")
	}
	return string(raw)
}

// unquote drops the quotes of a string's repr, so `"hello"` evaluates to the
// text hello, which is what E2B clients get and compare against.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// translate maps one iopub message to the stream lines it produces.
func translate(m *jupyter.Message) []any {
	switch m.Type() {
	case "stream":
		var c struct {
			Name string `json:"name"`
			Text string `json:"text"`
		}
		if m.Decode(&c) != nil || (c.Name != "stdout" && c.Name != "stderr") {
			return nil
		}
		return []any{streamLine{Type: c.Name, Text: c.Text, Timestamp: m.Header.Date}}
	case "execute_result", "display_data":
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if m.Decode(&c) != nil {
			return nil
		}
		return []any{resultLine(c.Data, m.Type() == "execute_result")}
	case "error":
		var c struct {
			Ename     string   `json:"ename"`
			Evalue    string   `json:"evalue"`
			Traceback []string `json:"traceback"`
		}
		if m.Decode(&c) != nil {
			return nil
		}
		return []any{errorLine{Type: lineError, Name: c.Ename, Value: c.Evalue, Traceback: strings.Join(c.Traceback, "\n")}}
	case "execute_input":
		var c struct {
			ExecutionCount int `json:"execution_count"`
		}
		if m.Decode(&c) != nil {
			return nil
		}
		return []any{countLine{Type: lineCount, ExecutionCount: c.ExecutionCount}}
	}
	return nil
}

// lineWriter writes NDJSON lines to a streaming response. Writes come from
// the execution and from the keepalive ticker, hence the lock.
type lineWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	last    time.Time
	failed  bool
	onFail  func()
	stop    chan struct{}
	done    chan struct{}
}

func newLineWriter(w http.ResponseWriter, onFail func()) *lineWriter {
	lw := &lineWriter{w: w, onFail: onFail, last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	lw.flusher, _ = w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	lw.flush()
	go lw.keepalive()
	return lw
}

func (lw *lineWriter) keepalive() {
	defer close(lw.done)
	t := time.NewTicker(keepaliveInterval / 2)
	defer t.Stop()
	for {
		select {
		case <-lw.stop:
			return
		case <-t.C:
			lw.mu.Lock()
			quiet := time.Since(lw.last) >= keepaliveInterval
			lw.mu.Unlock()
			if quiet {
				lw.write(typeLine{Type: lineKeepalive})
			}
		}
	}
}

// write encodes one line; after the first failed write (the client is gone)
// it only drops lines.
func (lw *lineWriter) write(v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.failed {
		return
	}
	lw.last = time.Now()
	if _, err := lw.w.Write(buf.Bytes()); err != nil {
		lw.fail()
		return
	}
	lw.flush()
}

func (lw *lineWriter) flush() {
	if lw.flusher != nil {
		lw.flusher.Flush()
	}
}

func (lw *lineWriter) fail() {
	lw.failed = true
	if lw.onFail != nil {
		go lw.onFail()
	}
}

// close stops the keepalives; the handler returns after it.
func (lw *lineWriter) close() {
	close(lw.stop)
	<-lw.done
}
