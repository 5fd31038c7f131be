// Package template builds templates from OCI images: pull the image, unpack
// it into a content-addressed read-only rootfs, boot it under gVisor, wait
// for its probe to answer, and checkpoint it. That checkpoint is the
// template; sandboxes are restores of it.
//
// Every build is a job. The job and its template are recorded in the store
// before anything else happens and updated at each phase, so clients can
// follow a build and a server restart finds every build it interrupted.
package template

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/envdclient"
	"cube/internal/id"
	"cube/internal/node"
	"cube/internal/oci"
	"cube/internal/quota"
	"cube/internal/store"
)

// Defaults for what a build request leaves out.
const (
	// DefaultProbePort is envd's port; its GET /health answers 204 as soon
	// as the agent runs. Templates that must be warm before their snapshot
	// (the code interpreter on 49999) name their own probe port.
	DefaultProbePort    = protocol.EnvdPort
	DefaultProbePath    = envdclient.HealthPath
	DefaultCPUCount     = 2
	DefaultMemoryMB     = 512
	DefaultDiskSizeMB   = 1024
	DefaultProbeTimeout = 60 * time.Second
	DefaultConcurrency  = 2
)

// RestartReason is the error of a build that a server restart interrupted.
const RestartReason = "interrupted by a server restart; create the template again"

// ShutdownReason is the error of a build that a server shutdown stopped.
const ShutdownReason = "interrupted by a server shutdown; create the template again"

// Snapshotter boots a template from its rootfs, waits for probe and
// checkpoints it; *node.Node is one. On failure it leaves no checkpoint.
type Snapshotter interface {
	BuildSnapshot(ctx context.Context, tpl *store.Template, probe func(ctx context.Context, addr netip.Addr) error, phase func(node.Phase)) error
}

// Config configures a Builder. DataDir, Store and Snapshotter are required.
type Config struct {
	// DataDir holds images/ (the blob cache), rootfs/ and templates/.
	DataDir     string
	Store       *store.Store
	Snapshotter Snapshotter
	Logger      *slog.Logger
	// NodeID is the node this builder runs on: the templates it builds
	// record it, since their files are in its data directory.
	NodeID string
	// Quota holds each team to its quotas of builds at once and disk;
	// nil holds none.
	Quota *quota.Checker
	// ProbeTimeout bounds the wait for the probe's first 2xx answer;
	// default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Concurrency bounds the builds that run at once; the others wait in
	// PULLING at 0 %. Default DefaultConcurrency.
	Concurrency int
	// ImportDir is the only directory local image sources (oci-archive:,
	// oci:, docker-archive:) are read from, and where uploads go; default
	// <DataDir>/imports. It is created, and kept, mode 0700.
	ImportDir string
	// Limits bound what unpacking an image may write; zero fields take
	// oci's defaults.
	Limits oci.Limits
	// InsecureRegistries may be reached over plain HTTP or with untrusted
	// certificates (host[:port], or host for any port); every other
	// registry only over verified HTTPS.
	InsecureRegistries []string
	// BuildTimeout bounds a build by steps from its start to its
	// snapshot; default DefaultBuildTimeout.
	BuildTimeout time.Duration
	// MaxLayerBytes bounds what one build step may write; default
	// DefaultMaxLayerBytes.
	MaxLayerBytes int64
	// MaxFilesBytes bounds the files of one COPY step, unpacked; default
	// DefaultMaxFilesBytes.
	MaxFilesBytes int64
	// ReadyTimeout bounds the wait for a build's ready command; default
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// Builder runs template builds. It implements cube.TemplateBuilder.
type Builder struct {
	cfg Config
	log *slog.Logger
	st  *store.Store
	sem chan struct{}

	// importDir is cfg.ImportDir with every symbolic link resolved.
	importDir string

	// mu serialises the claims of template IDs and aliases.
	mu     sync.Mutex
	closed bool
	// uploadsInUse counts the builds of each uploaded archive, which
	// sweeping must leave alone.
	uploadsInUse map[string]int
	// uploading bounds the uploads received at once.
	uploading chan struct{}
	// builds are the builds by steps from request to end, by build ID;
	// waiting lists the started ones waiting for a build slot, in order.
	builds  map[string]*stepBuild
	waiting []string
	// active are the builds under way (image builds from request to end,
	// builds by steps from start to end), by job ID, each with the cancel
	// of its own context; CancelBuilds stops them.
	active map[string]*activeBuild
	// layerUse counts the running builds of each layer.
	layerMu  sync.Mutex
	layerUse map[string]int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ cube.TemplateBuilder = (*Builder)(nil)

// New returns a Builder. Call Recover before the first build.
func New(cfg Config) (*Builder, error) {
	if cfg.DataDir == "" || cfg.Store == nil || cfg.Snapshotter == nil {
		return nil, errors.New("template: DataDir, Store and Snapshotter are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.BuildTimeout <= 0 {
		cfg.BuildTimeout = DefaultBuildTimeout
	}
	if cfg.MaxLayerBytes <= 0 {
		cfg.MaxLayerBytes = DefaultMaxLayerBytes
	}
	if cfg.MaxFilesBytes <= 0 {
		cfg.MaxFilesBytes = DefaultMaxFilesBytes
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.ImportDir == "" {
		cfg.ImportDir = filepath.Join(cfg.DataDir, "imports")
	}
	if cfg.Limits.MaxBytes <= 0 {
		cfg.Limits.MaxBytes = oci.DefaultMaxImageBytes
	}
	if cfg.Limits.MaxFileBytes <= 0 {
		cfg.Limits.MaxFileBytes = oci.DefaultMaxFileBytes
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "templates"), 0o755); err != nil {
		return nil, fmt.Errorf("create templates: %w", err)
	}
	// Images, their unpacked trees and imports hold files of any owner
	// and mode, setuid ones included: no other host user may reach them.
	for _, d := range []string{filepath.Join(cfg.DataDir, "images"), filepath.Join(cfg.DataDir, "rootfs"), cfg.ImportDir,
		filepath.Join(cfg.DataDir, "layers"), filepath.Join(cfg.DataDir, "buildfiles")} {
		if err := oci.PrivateDir(d); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	importDir, err := filepath.EvalSymlinks(cfg.ImportDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Builder{
		cfg: cfg, log: cfg.Logger, st: cfg.Store,
		sem: make(chan struct{}, cfg.Concurrency),
		ctx: ctx, cancel: cancel, importDir: importDir, uploadsInUse: map[string]int{},
		uploading: make(chan struct{}, cfg.Concurrency),
		builds:    map[string]*stepBuild{}, layerUse: map[string]int{},
		active: map[string]*activeBuild{},
	}, nil
}

// Close stops running builds (they end FAILED with ShutdownReason) and
// waits for them.
func (b *Builder) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}

// Recover settles what an earlier server process left: every job that had
// not finished is marked FAILED with RestartReason, so is its template,
// and half-written checkpoints and unpacks are removed. Call it at start,
// before the first build.
func (b *Builder) Recover(ctx context.Context) error {
	jobs, err := b.st.Jobs().List(ctx)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	for _, j := range jobs {
		if j.Node != "" && j.Node != b.cfg.NodeID {
			continue // another node's build
		}
		if j.Phase == store.PhaseReady || j.Phase == store.PhaseFailed {
			continue
		}
		// The template is stored ready (its image durable) before its job
		// is; a restart in between finishes the job.
		if t, err := b.st.Templates().Get(ctx, j.TemplateID); err == nil && t.Status == store.TemplateReady && t.BuildJob == j.ID {
			b.log.Info("template build finished before a restart; recording its job as ready", "job", j.ID, "template", j.TemplateID)
			j.Phase, j.Progress, j.UpdatedAt = store.PhaseReady, 100, now
			if err := b.st.Jobs().Put(ctx, j); err != nil {
				return err
			}
			continue
		}
		b.log.Warn("template build interrupted by a restart", "job", j.ID, "template", j.TemplateID, "phase", j.Phase)
		j.Phase, j.Error, j.UpdatedAt = store.PhaseFailed, RestartReason, now
		if err := b.st.Jobs().Put(ctx, j); err != nil {
			return err
		}
	}
	tpls, err := b.st.Templates().List(ctx, string(store.TemplateBuilding))
	if err != nil {
		return err
	}
	for _, t := range tpls {
		if strings.HasPrefix(t.ID, "snap-") || !t.HeldBy(b.cfg.NodeID) {
			continue // snapshots are the node's to reconcile; other nodes' builds theirs
		}
		t.Status, t.Error, t.UpdatedAt = store.TemplateFailed, RestartReason, now
		if err := b.st.Templates().Put(ctx, t); err != nil {
			return err
		}
		b.removeTemplateDir(t.ID)
	}
	if err := b.publishDefault(ctx); err != nil {
		return err
	}
	b.sweepUploads(0)
	b.pruneLogs()
	b.recoverSteps(ctx)
	return oci.Sweep(filepath.Join(b.cfg.DataDir, "rootfs"))
}

// DefaultAlias names an install's default template: `make template`
// builds it (template ID code-interpreter, aliases base and
// code-interpreter-v1) with the server's own key, the first team's, and
// E2B's SDKs create sandboxes from "base" when they name no template.
const DefaultAlias = "base"

// isDefault reports whether a template of team, with ID id and aliases,
// is the install's default template: the first team's (cube.FirstTeam)
// template named DefaultAlias. Every team creates sandboxes from it, so it
// is public: the builder records it public when a build makes it
// (BuildTemplate, RequestBuild), Recover makes it public at start, and
// SetPublic keeps it so. The rule lives here, where templates are made,
// rather than in a flag of `make template`, so that an install from before
// teams is covered too: it built the template without a team, and at
// start (before Recover) its records were given to the first team
// (store.AdoptUnowned) and so stayed private. Another team's template
// named base is its own and private, and found before this one by that
// team (store.FindTemplate).
func isDefault(team, id string, aliases []string) bool {
	return team == cube.FirstTeam && (id == DefaultAlias || slices.Contains(aliases, DefaultAlias))
}

// publishDefault makes the default template public (see isDefault).
func (b *Builder) publishDefault(ctx context.Context) error {
	all, err := b.st.Templates().List(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.Public || t.SourceSandbox != "" || !isDefault(t.Team, t.ID, t.Aliases) {
			continue
		}
		err := b.st.Templates().Update(ctx, t.ID, func(cur *store.Template) error {
			cur.Public = true
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("make the default template %s public: %w", t.ID, err)
		}
		b.log.Info("the default template is public: every team may create sandboxes from it", "template", t.ID, "alias", DefaultAlias)
	}
	return nil
}

// removeTemplateDir removes what a failed build of id may have left.
// Builds only run for IDs without a ready template, so nothing in the
// directory is in use.
func (b *Builder) removeTemplateDir(tplID string) {
	if !id.ValidName(tplID) {
		return
	}
	if err := os.RemoveAll(filepath.Join(b.cfg.DataDir, "templates", tplID)); err != nil {
		b.log.Warn("remove template directory", "template", tplID, "err", err)
	}
}

// BuildTemplate implements cube.TemplateBuilder. The template ID and aliases
// must be free within req.Team: a building or ready template of the team
// with the same ID, or any other of the team's templates holding one of
// the names, is a Conflict (store.OwnTemplate's rule: other teams'
// aliases do not clash). A template ID is also the template's key, unique
// across teams: another team's template of that ID is a Conflict that
// says nothing of it. A failed template of the team with the same ID is
// replaced, and the team's failed templates give up aliases the new build
// claims.
func (b *Builder) BuildTemplate(ctx context.Context, req cube.BuildRequest) (*cube.BuildJob, error) {
	src, err := oci.ParseSource(req.Image)
	if err != nil {
		return nil, cube.Errorf(cube.Invalid, "%v", err).WithField("image")
	}
	switch src.Kind {
	case oci.KindRegistry:
		if host := src.RegistryHost(); req.InsecureRegistry && !oci.InsecureAllowed(b.cfg.InsecureRegistries, host) {
			return nil, cube.Errorf(cube.Invalid, "registry %s is not listed as insecure: cube-server reaches registries over verified HTTPS only, except those it is started with --insecure-registry for (add --insecure-registry %s if you trust it)", host, host)
		}
	default:
		p, err := b.localPath(src)
		if err != nil && !errors.Is(err, oci.ErrNotFound) {
			return nil, err
		}
		src.Path = p
	}
	if req.TemplateID != "" && !id.ValidName(req.TemplateID) {
		return nil, cube.Errorf(cube.Invalid, "invalid template ID %q", req.TemplateID).WithField("templateID")
	}
	for _, a := range req.Aliases {
		if !id.ValidName(a) {
			return nil, cube.Errorf(cube.Invalid, "invalid alias %q", a).WithField("aliases")
		}
	}
	if err := b.admitBuild(ctx, req.Team); err != nil {
		return nil, err
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, cube.Errorf(cube.Unavailable, "the server is shutting down")
	}
	all, err := b.st.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	tplID := req.TemplateID
	if tplID == "" {
		tplID = id.New("", 20)
	}
	var release []*store.Template // failed templates giving up aliases
	for _, t := range all {
		mine := owns(req.Team, t)
		if t.ID == tplID && !mine {
			return nil, cube.Errorf(cube.Conflict, "template ID %q is taken: choose another, or leave it out for a generated one", tplID)
		}
		if !mine {
			continue
		}
		if t.ID == tplID {
			if t.Status != store.TemplateFailed {
				return nil, cube.Errorf(cube.Conflict, "template %q already exists (%s): delete it first with `cubemastercli tpl delete --template-id %s`", tplID, t.Status, tplID)
			}
			continue
		}
		if t.Status == store.TemplateFailed {
			if slices.ContainsFunc(t.Aliases, func(a string) bool { return slices.Contains(req.Aliases, a) || a == tplID }) {
				release = append(release, t)
			}
			continue
		}
		if slices.Contains(t.Aliases, tplID) {
			return nil, cube.Errorf(cube.Conflict, "template ID %q is an alias of template %s", tplID, t.ID)
		}
		for _, a := range req.Aliases {
			if a == t.ID || slices.Contains(t.Aliases, a) {
				return nil, cube.Errorf(cube.Conflict, "alias %q is taken by template %s", a, t.ID)
			}
		}
	}
	for _, t := range release {
		t.Aliases = slices.DeleteFunc(t.Aliases, func(a string) bool { return slices.Contains(req.Aliases, a) || a == tplID })
		if err := b.st.Templates().Put(ctx, t); err != nil {
			return nil, err
		}
	}

	now := time.Now().UTC()
	job := &store.Job{ID: id.New("", 20), Team: req.Team, TemplateID: tplID, Phase: store.PhasePulling, CreatedAt: now, UpdatedAt: now, Node: b.cfg.NodeID}
	tpl := &store.Template{
		ID: tplID, Team: req.Team, Public: isDefault(req.Team, tplID, req.Aliases),
		Aliases: slices.Clone(req.Aliases), Status: store.TemplateBuilding, Node: b.cfg.NodeID,
		CreatedAt: now, UpdatedAt: now, Image: strings.TrimSpace(req.Image), BuildJob: job.ID,
		CPUCount: or(req.CPUCount, DefaultCPUCount), MemoryMB: or(req.MemoryMB, DefaultMemoryMB),
		DiskSizeMB: or(req.DiskSizeMB, DefaultDiskSizeMB), ExposedPorts: slices.Clone(req.ExposedPorts),
		ProbePort: or(req.ProbePort, DefaultProbePort), ProbePath: req.ProbePath,
	}
	if tpl.ProbePath == "" {
		tpl.ProbePath = DefaultProbePath
	}
	if err := b.st.Jobs().Put(ctx, job); err != nil {
		return nil, err
	}
	if err := b.st.Templates().Put(ctx, tpl); err != nil {
		b.st.Jobs().Delete(context.Background(), job.ID)
		return nil, err
	}
	b.log.Info("template build started", "job", job.ID, "template", tplID, "image", tpl.Image)
	view := jobView(job) // before the build goroutine owns job
	if b.isUpload(src.Path) {
		b.uploadsInUse[src.Path]++
	}
	b.wg.Add(1)
	go b.run(b.track(job.ID, job.Team), job, tpl, src, req)
	return view, nil
}

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// BuildJob implements cube.TemplateBuilder: another team's job is not
// found.
func (b *Builder) BuildJob(ctx context.Context, team, jobID string) (*cube.BuildJob, error) {
	j, err := b.st.Jobs().Get(ctx, jobID)
	if err == nil && !ownsJob(team, j) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, cube.Errorf(cube.NotFound, "build job %q not found", jobID)
	}
	if err != nil {
		return nil, err
	}
	return jobView(j), nil
}

// TemplateDetails implements cube.TemplateBuilder.
func (b *Builder) TemplateDetails(ctx context.Context) (map[string]cube.TemplateDetail, error) {
	all, err := b.st.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]cube.TemplateDetail, len(all))
	for _, t := range all {
		out[t.ID] = cube.TemplateDetail{
			Status: string(t.Status), Error: t.Error, Image: t.Image, ImageDigest: t.ImageDigest,
			SizeBytes: t.SizeBytes, ExposedPorts: t.ExposedPorts, ProbePort: t.ProbePort,
			ProbePath: t.ProbePath, StartCmd: t.StartCmd, Cwd: t.Cwd, User: t.User, JobID: t.BuildJob,
		}
	}
	return out, nil
}

func jobView(j *store.Job) *cube.BuildJob {
	return &cube.BuildJob{ID: j.ID, TemplateID: j.TemplateID, Phase: string(j.Phase), Progress: j.Progress,
		Error: j.Error, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
}

// startCommand is the image's ENTRYPOINT and CMD with the request's
// overrides, the way `docker run --entrypoint CMD IMAGE ARGS...` reads.
func startCommand(cfg oci.ImageConfig, cmd, args []string) []string {
	entry, rest := cfg.Entrypoint, cfg.Cmd
	if len(cmd) > 0 {
		entry, rest = cmd, nil
	}
	if len(args) > 0 {
		rest = args
	}
	return append(slices.Clone(entry), rest...)
}

// mergeEnv returns the image's KEY=VALUE list with overrides applied:
// existing keys are replaced in place, new ones appended in name order.
func mergeEnv(image []string, over map[string]string) []string {
	out := slices.Clone(image)
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kv := k + "=" + over[k]
		i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") || e == k })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

// admitBuild says whether team may start one more build: its builds in
// progress (requested and not yet finished or failed) stay within its
// quota, and its disk is not full.
func (b *Builder) admitBuild(ctx context.Context, team string) error {
	if b.cfg.Quota == nil || team == "" {
		return nil
	}
	jobs, err := b.st.Jobs().List(ctx)
	if err != nil {
		return err
	}
	running := 0
	for _, j := range jobs {
		if j.Team == team && j.Phase != store.PhaseReady && j.Phase != store.PhaseFailed {
			running++
		}
	}
	if err := b.cfg.Quota.Builds(ctx, team, running); err != nil {
		return err
	}
	return b.cfg.Quota.Disk(ctx, team, 1)
}
