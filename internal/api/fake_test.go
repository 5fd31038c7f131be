package api

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"cube/internal/cube"
)

// fakeBackend is an in-memory node: enough state to check that handlers
// translate requests and answers faithfully.
type fakeBackend struct {
	mu        sync.Mutex
	now       time.Time
	seq       int
	sandboxes map[string]*cube.Sandbox
	templates []cube.Template
	snapshots []cube.Snapshot
	logs      map[string][]cube.LogEntry
	upstream  string // Resolve's answer for every running sandbox
	resolves  map[string]int
	maxCount  int

	lastCreate  cube.CreateRequest
	lastTimeout struct {
		id         string
		d          time.Duration
		extendOnly bool
	}
	lastConnect cube.ConnectRequest
	lastNetwork cube.Network
}

func newFake() *fakeBackend {
	return &fakeBackend{
		now:       time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		sandboxes: map[string]*cube.Sandbox{},
		logs:      map[string][]cube.LogEntry{},
		resolves:  map[string]int{},
		templates: []cube.Template{{
			ID: "base0000000000000000", Aliases: []string{"base", "code-interpreter-v1"}, BuildID: "b1",
			CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, EnvdVersion: "0.5.7",
			CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), UpdatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		}},
		maxCount: 1000,
	}
}

func (f *fakeBackend) template(idOrAlias string) *cube.Template {
	for i := range f.templates {
		t := &f.templates[i]
		if t.ID == idOrAlias {
			return t
		}
		for _, a := range t.Aliases {
			if a == idOrAlias {
				return t
			}
		}
	}
	return nil
}

// find is the template name (an ID or an alias) means to team, as
// store.FindTemplate finds it: an ID of one it may use, an alias of its
// own first, then of a public one.
func (f *fakeBackend) find(team, name string) *cube.Template {
	var public *cube.Template
	for i := range f.templates {
		t := &f.templates[i]
		if !visible(t, team) {
			continue
		}
		if t.ID == name {
			return t
		}
		if !slices.Contains(t.Aliases, name) {
			continue
		}
		if owned(t, team) {
			return t
		}
		if public == nil {
			public = t
		}
	}
	return public
}

// owned is the fake's rule for templates a team may change: its own, and
// those made without a team.
func owned(t *cube.Template, team string) bool { return t.Team == "" || t.Team == team }

func (f *fakeBackend) sandbox(id string) (*cube.Sandbox, error) {
	sb, ok := f.sandboxes[id]
	if !ok {
		return nil, cube.Errorf(cube.NotFound, "sandbox %q not found", id)
	}
	return sb, nil
}

// Resolve answers like the node: unknown → cube.NotFound, paused with
// auto-resume → a Paused target, paused without → an error.
func (f *fakeBackend) Resolve(ctx context.Context, id string, port int) (cube.Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resolves[id]++
	sb, ok := f.sandboxes[id]
	switch {
	case !ok:
		return cube.Target{}, cube.Errorf(cube.NotFound, "sandbox %q not found", id)
	case sb.State == cube.StatePaused && sb.AutoResume:
		return cube.Target{Paused: true, TrafficAccessToken: sb.TrafficAccessToken}, nil
	case sb.State == cube.StatePaused:
		return cube.Target{}, fmt.Errorf("sandbox %q is paused", id)
	}
	return cube.Target{Addr: f.upstream, TrafficAccessToken: sb.TrafficAccessToken}, nil
}

func (f *fakeBackend) Resume(ctx context.Context, id string, port int) (cube.Target, error) {
	f.mu.Lock()
	if sb, ok := f.sandboxes[id]; ok && sb.State == cube.StatePaused && sb.AutoResume {
		sb.State = cube.StateRunning
	}
	f.mu.Unlock()
	return f.Resolve(ctx, id, port)
}

func (f *fakeBackend) CreateSandbox(ctx context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCreate = req
	t := f.find(req.Team, req.Template)
	if t == nil {
		return nil, cube.Errorf(cube.NotFound, "template %q not found", req.Template)
	}
	if len(f.sandboxes) >= f.maxCount {
		return nil, cube.Errorf(cube.Capacity, "sandbox limit of %d reached", f.maxCount).WithRetryAfter(2 * time.Second)
	}
	f.seq++
	// Each sandbox starts a second after the previous one so lists sort.
	started := f.now.Add(time.Duration(f.seq) * time.Second)
	sb := &cube.Sandbox{
		ID: "sb" + strconv.Itoa(f.seq), Team: req.Team, TemplateID: t.ID, EnvdVersion: t.EnvdVersion,
		EnvdAccessToken: "envd-token-" + strconv.Itoa(f.seq),
		State:           cube.StateRunning, StartedAt: started, EndAt: started.Add(req.Timeout),
		CPUCount: t.CPUCount, MemoryMB: t.MemoryMB, DiskSizeMB: t.DiskSizeMB,
		Metadata: req.Metadata, Network: req.Network, AutoPause: req.AutoPause, AutoResume: req.AutoResume,
	}
	if req.Template != t.ID {
		sb.Alias = req.Template
	}
	if req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic {
		sb.TrafficAccessToken = "traffic-token-" + strconv.Itoa(f.seq)
	}
	f.sandboxes[sb.ID] = sb
	f.logs[sb.ID] = []cube.LogEntry{
		{Time: started, Level: cube.LevelInfo, Message: "sandbox created", Fields: map[string]string{"template": t.ID}},
		{Time: started.Add(time.Second), Level: cube.LevelDebug, Message: "process started", Fields: map[string]string{"pid": "7"}},
		{Time: started.Add(2 * time.Second), Level: cube.LevelError, Message: "process exited", Fields: map[string]string{"exit": "1"}},
	}
	cp := *sb
	return &cp, nil
}

func (f *fakeBackend) GetSandbox(ctx context.Context, id string) (*cube.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.sandbox(id)
	if err != nil {
		return nil, err
	}
	cp := *sb
	return &cp, nil
}

func (f *fakeBackend) ListSandboxes(ctx context.Context, flt cube.ListFilter) ([]cube.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cube.Sandbox
	for _, sb := range f.sandboxes {
		if flt.Matches(sb) {
			out = append(out, *sb)
		}
	}
	// Deliberately unsorted order: the control plane must sort.
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out, nil
}

// ListSandboxPage pages what ListSandboxes returns, in memory.
func (f *fakeBackend) ListSandboxPage(ctx context.Context, flt cube.ListFilter, p cube.Page) ([]cube.Sandbox, *cube.Cursor, error) {
	items, err := f.ListSandboxes(ctx, flt)
	if err != nil {
		return nil, nil, err
	}
	if !p.Since.IsZero() {
		items = slices.DeleteFunc(items, func(sb cube.Sandbox) bool { return sb.StartedAt.Before(p.Since) })
	}
	return pageOf(items, sandboxKey, p)
}

// pageOf is a backend's page of items, cut in memory by the API's own
// paging (which the snapshots' secrets' lists still use).
func pageOf[T any](items []T, key func(*T) (time.Time, string), p cube.Page) ([]T, *cube.Cursor, error) {
	token := ""
	if p.After != nil {
		token = encodeCursor(p.After.Time, p.After.ID)
	}
	items, next, err := page(items, key, p.Asc, p.Limit, token)
	if err != nil || next == "" {
		return items, nil, err
	}
	t, id, err := decodeCursor(next)
	return items, &cube.Cursor{Time: t, ID: id}, err
}

func (f *fakeBackend) KillSandbox(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.sandbox(id); err != nil {
		return err
	}
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeBackend) SetTimeout(ctx context.Context, id string, d time.Duration, extendOnly bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.sandbox(id)
	if err != nil {
		return err
	}
	f.lastTimeout.id, f.lastTimeout.d, f.lastTimeout.extendOnly = id, d, extendOnly
	end := f.now.Add(d)
	if !extendOnly || end.After(sb.EndAt) {
		sb.EndAt = end
	}
	return nil
}

func (f *fakeBackend) ConnectSandbox(ctx context.Context, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastConnect = req
	sb, err := f.sandbox(id)
	if err != nil {
		return nil, false, err
	}
	resumed := false
	if sb.State == cube.StatePaused {
		sb.State, resumed = cube.StateRunning, true
	} else if req.RequirePaused {
		return nil, false, cube.Errorf(cube.Conflict, "sandbox %q is already running", id)
	}
	if end := f.now.Add(req.Timeout); end.After(sb.EndAt) {
		sb.EndAt = end
	}
	cp := *sb
	return &cp, resumed, nil
}

func (f *fakeBackend) PauseSandbox(ctx context.Context, id string, keepMemory bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.sandbox(id)
	if err != nil {
		return err
	}
	if sb.State == cube.StatePaused {
		return cube.Errorf(cube.Conflict, "sandbox %q is already paused", id)
	}
	sb.State = cube.StatePaused
	return nil
}

func (f *fakeBackend) UpdateNetwork(ctx context.Context, id string, n cube.Network) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.sandbox(id); err != nil {
		return err
	}
	f.lastNetwork = n
	return nil
}

func (f *fakeBackend) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]cube.Metric, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.sandbox(id); err != nil {
		return nil, err
	}
	m := cube.Metric{Time: f.now, CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 100 << 20, MemTotal: 512 << 20, MemCache: 10 << 20, DiskUsed: 1 << 20, DiskTotal: 1 << 30}
	if start.IsZero() && end.IsZero() {
		return []cube.Metric{m}, nil
	}
	m2 := m
	m2.Time = m.Time.Add(5 * time.Second)
	return []cube.Metric{m, m2}, nil
}

func (f *fakeBackend) SandboxLogs(ctx context.Context, id string) ([]cube.LogEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.sandbox(id); err != nil {
		return nil, err
	}
	return append([]cube.LogEntry(nil), f.logs[id]...), nil
}

// visible is the fake's rule for templates a team may use: its own,
// public ones, and those made without a team (every test template).
func visible(t *cube.Template, team string) bool {
	return t.Team == "" || t.Team == team || t.Public
}

func (f *fakeBackend) ListTemplates(ctx context.Context, team string) ([]cube.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cube.Template
	for _, t := range f.templates {
		if visible(&t, team) {
			out = append(out, t)
		}
	}
	return out, nil
}

func (f *fakeBackend) GetTemplate(ctx context.Context, team, idOrAlias string) (*cube.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.find(team, idOrAlias)
	if t == nil {
		return nil, cube.Errorf(cube.NotFound, "template %q not found", idOrAlias)
	}
	cp := *t
	return &cp, nil
}

func (f *fakeBackend) DeleteTemplate(ctx context.Context, team, idOrAlias string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.snapshots {
		if f.snapshots[i].ID == idOrAlias {
			f.snapshots = append(f.snapshots[:i], f.snapshots[i+1:]...)
			return nil
		}
	}
	t := f.find(team, idOrAlias)
	if t == nil {
		return cube.Errorf(cube.NotFound, "template %q not found", idOrAlias)
	}
	if !owned(t, team) {
		return cube.Errorf(cube.Forbidden, "template %q is another team's public template", idOrAlias)
	}
	for i := range f.templates {
		if f.templates[i].ID == t.ID {
			f.templates = append(f.templates[:i], f.templates[i+1:]...)
			break
		}
	}
	return nil
}

func (f *fakeBackend) CountSandboxes(ctx context.Context) (map[cube.SandboxState]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[cube.SandboxState]int{}
	for _, sb := range f.sandboxes {
		out[sb.State]++
	}
	return out, nil
}

func (f *fakeBackend) CreateSnapshot(ctx context.Context, id, name string) (*cube.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.sandbox(id); err != nil {
		return nil, err
	}
	f.seq++
	sn := cube.Snapshot{ID: fmt.Sprintf("snap-%d", f.seq), SandboxID: id, CreatedAt: f.now.Add(time.Duration(f.seq) * time.Second)}
	if name != "" {
		sn.Names = []string{name}
	}
	f.snapshots = append(f.snapshots, sn)
	return &sn, nil
}

func (f *fakeBackend) ListSnapshots(ctx context.Context, flt cube.SnapshotFilter, p cube.Page) ([]cube.Snapshot, *cube.Cursor, error) {
	f.mu.Lock()
	var out []cube.Snapshot
	for _, sn := range f.snapshots {
		if flt.SandboxID != "" && sn.SandboxID != flt.SandboxID {
			continue
		}
		out = append(out, sn)
	}
	f.mu.Unlock()
	return pageOf(out, func(s *cube.Snapshot) (time.Time, string) { return s.CreatedAt, s.ID }, p)
}

func (f *fakeBackend) ForkSandbox(ctx context.Context, id string, req cube.ForkRequest) ([]cube.ForkResult, error) {
	f.mu.Lock()
	if _, err := f.sandbox(id); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	tpl := f.sandboxes[id].TemplateID
	f.mu.Unlock()
	var out []cube.ForkResult
	for i := 0; i < req.Count; i++ {
		if i == 1 {
			// The second child always fails, to check per-child errors.
			out = append(out, cube.ForkResult{Err: cube.Errorf(cube.DiskFull, "no space left for child %d", i)})
			continue
		}
		sb, err := f.CreateSandbox(ctx, cube.CreateRequest{Template: tpl, Timeout: req.Timeout})
		out = append(out, cube.ForkResult{Sandbox: sb, Err: err})
	}
	return out, nil
}

func (f *fakeBackend) RollbackSandbox(ctx context.Context, id, snapshotID string) (*cube.Rollback, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.sandbox(id); err != nil {
		return nil, err
	}
	for _, sn := range f.snapshots {
		if sn.ID == snapshotID {
			if sn.SandboxID != id {
				return nil, cube.Errorf(cube.Forbidden, "snapshot %q was not taken by sandbox %q", snapshotID, id)
			}
			return &cube.Rollback{OperationID: "op1", Status: "completed"}, nil
		}
	}
	return nil, cube.Errorf(cube.NotFound, "snapshot %q not found", snapshotID)
}

// coreOnly hides the optional interfaces of a backend.
type coreOnly struct{ cube.Backend }
