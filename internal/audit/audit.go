// Package audit keeps the trail of changes made through the API in the
// state store (shared by a cluster's nodes), off the path of the requests
// it records: entries queue in memory and one writer appends them in
// batches, so a create waits for no audit write. The trail is bounded by
// age and by rows (Retention), trimmed by the same writer.
package audit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// Retention bounds the trail: entries older than MaxAge go, and the
// oldest beyond MaxRows. Zero fields take the defaults.
type Retention struct {
	MaxAge  time.Duration
	MaxRows int64
}

// Defaults of Retention.
const (
	DefaultMaxAge  = 90 * 24 * time.Hour
	DefaultMaxRows = 1_000_000
)

// queueLen bounds the entries waiting to be written; beyond it entries are
// dropped, counted and logged (a database outage must not grow memory).
const queueLen = 4096

// trimEvery is how often the writer applies the retention.
const trimEvery = 10 * time.Minute

// Log is the audit trail of one node.
type Log struct {
	st   *store.Store
	node string
	keep Retention
	log  *slog.Logger

	queue   chan cube.AuditEntry
	stop    chan struct{}
	done    chan struct{}
	closeMu sync.Once

	mu      sync.Mutex
	dropped int64
}

var _ cube.Audit = (*Log)(nil)

// New starts the trail of node in st; Close stops it, writing what is
// queued.
func New(st *store.Store, node string, keep Retention, log *slog.Logger) *Log {
	if keep.MaxAge <= 0 {
		keep.MaxAge = DefaultMaxAge
	}
	if keep.MaxRows <= 0 {
		keep.MaxRows = DefaultMaxRows
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Log{st: st, node: node, keep: keep, log: log,
		queue: make(chan cube.AuditEntry, queueLen), stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// Record queues an entry, stamped with this node and, if unset, the time.
func (l *Log) Record(e cube.AuditEntry) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Node = l.node
	select {
	case l.queue <- e:
	default:
		l.mu.Lock()
		l.dropped++
		l.mu.Unlock()
	}
}

// Flush writes what is queued now; tests and Close use it.
func (l *Log) Flush(ctx context.Context) error { return l.flush(ctx, nil) }

// flush writes batch and what is queued, as one.
func (l *Log) flush(ctx context.Context, batch []store.AuditRecord) error {
	for {
		select {
		case e := <-l.queue:
			batch = append(batch, recordOf(e))
			continue
		default:
		}
		break
	}
	if len(batch) == 0 {
		return nil
	}
	return l.st.AppendAudit(ctx, batch)
}

func (l *Log) run() {
	defer close(l.done)
	trim := time.NewTicker(trimEvery)
	defer trim.Stop()
	l.trim()
	for {
		select {
		case <-l.stop:
			l.write(nil)
			return
		case e := <-l.queue:
			// With what else queued meanwhile, as one write.
			l.write([]store.AuditRecord{recordOf(e)})
		case <-trim.C:
			l.trim()
		}
	}
}

func (l *Log) write(first []store.AuditRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.flush(ctx, first); err != nil {
		l.log.Warn("audit: entries not written", "err", err)
	}
	l.mu.Lock()
	n := l.dropped
	l.dropped = 0
	l.mu.Unlock()
	if n > 0 {
		l.log.Warn("audit: entries dropped: the queue was full", "dropped", n)
	}
}

func (l *Log) trim() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n, err := l.st.TrimAudit(ctx, time.Now().Add(-l.keep.MaxAge), l.keep.MaxRows); err != nil {
		l.log.Warn("audit: trim", "err", err)
	} else if n > 0 {
		l.log.Info("audit: old entries removed", "removed", n)
	}
}

// Close writes what is queued and stops.
func (l *Log) Close() {
	l.closeMu.Do(func() {
		close(l.stop)
		<-l.done
	})
}

// ListAudit returns the entries f selects, newest first.
func (l *Log) ListAudit(ctx context.Context, f cube.AuditFilter) ([]cube.AuditEntry, error) {
	recs, err := l.st.ListAudit(ctx, store.AuditFilter{Team: f.Team, KeyID: f.KeyID, Target: f.Target, Since: f.Since, Before: f.Before, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]cube.AuditEntry, len(recs))
	for i, r := range recs {
		out[i] = cube.AuditEntry{Seq: r.Seq, Time: r.Time, Team: r.Team, KeyID: r.KeyID, KeyName: r.KeyName,
			Method: r.Method, Route: r.Route, Target: r.Target, Status: r.Status, Node: r.Node}
	}
	return out, nil
}

func recordOf(e cube.AuditEntry) store.AuditRecord {
	return store.AuditRecord{Time: e.Time, Team: e.Team, KeyID: e.KeyID, KeyName: e.KeyName,
		Method: e.Method, Route: e.Route, Target: e.Target, Status: e.Status, Node: e.Node}
}
