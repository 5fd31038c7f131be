package server

import (
	"context"
	"io"
	"log/slog"
	"time"

	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/secrets"
	"cube/internal/template"
	teamusage "cube/internal/usage"
)

// service is the core's service interfaces as this server provides them:
// sandboxes, snapshots and volumes from the node, builds from the template
// builder, nodes from the registry, secrets from the secret store. Every
// method names the part it goes to, and the checks below fail the build
// when one goes missing: the API finds optional features by type
// assertion, so a method lost to a clash of names (the parts share some,
// such as Close) would otherwise turn its routes into "not supported"
// without a word.
type service struct {
	node    *node.Node
	builder *template.Builder
	nodes   *cluster.Registry
	secrets *secrets.Store
	// usage reads what each team used from the shared store.
	usage   *teamusage.Reader
	creates *creates
	// forkAway starts the children of a fork on another node, when this
	// one takes no new sandboxes; nil forks only here.
	forkAway func(ctx context.Context, sandboxID string, req cube.ForkRequest, refused error) ([]cube.ForkResult, error)
}

var (
	_ cube.Backend         = (*service)(nil)
	_ cube.Pauser          = (*service)(nil)
	_ cube.Snapshotter     = (*service)(nil)
	_ cube.NetworkUpdater  = (*service)(nil)
	_ cube.Volumes         = (*service)(nil)
	_ cube.TemplateBuilder = (*service)(nil)
	_ cube.ArchiveImporter = (*service)(nil)
	_ cube.StepBuilder     = (*service)(nil)
	_ cube.NodeAdmin       = (*service)(nil)
	_ cube.Secrets         = (*service)(nil)
	_ cube.Usage           = (*service)(nil)
)

// Sandboxes.

// CreateSandbox creates a sandbox on this node while it takes new ones.
func (s *service) CreateSandbox(ctx context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	if err := s.nodes.Admit(); err != nil {
		return nil, err
	}
	sb, err := s.node.CreateSandbox(ctx, req)
	s.creates.record(err)
	return sb, err
}

func (s *service) GetSandbox(ctx context.Context, id string) (*cube.Sandbox, error) {
	return s.node.GetSandbox(ctx, id)
}

func (s *service) ListSandboxes(ctx context.Context, f cube.ListFilter) ([]cube.Sandbox, error) {
	return s.node.ListSandboxes(ctx, f)
}

func (s *service) ListSandboxPage(ctx context.Context, f cube.ListFilter, p cube.Page) ([]cube.Sandbox, *cube.Cursor, error) {
	return s.node.ListSandboxPage(ctx, f, p)
}

func (s *service) KillSandbox(ctx context.Context, id string) error {
	return s.node.KillSandbox(ctx, id)
}

func (s *service) SetTimeout(ctx context.Context, id string, timeout time.Duration, extendOnly bool) error {
	return s.node.SetTimeout(ctx, id, timeout, extendOnly)
}

func (s *service) ConnectSandbox(ctx context.Context, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	return s.node.ConnectSandbox(ctx, id, req)
}

func (s *service) SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]cube.Metric, error) {
	return s.node.SandboxMetrics(ctx, id, start, end)
}

func (s *service) SandboxLogs(ctx context.Context, id string) ([]cube.LogEntry, error) {
	return s.node.SandboxLogs(ctx, id)
}

func (s *service) CountSandboxes(ctx context.Context) (map[cube.SandboxState]int, error) {
	return s.node.CountSandboxes(ctx)
}

func (s *service) PauseSandbox(ctx context.Context, id string, keepMemory bool) error {
	return s.node.PauseSandbox(ctx, id, keepMemory)
}

func (s *service) UpdateNetwork(ctx context.Context, id string, n cube.Network) error {
	return s.node.UpdateNetwork(ctx, id, n)
}

// Snapshots, forks and rollbacks.

func (s *service) CreateSnapshot(ctx context.Context, sandboxID, name string) (*cube.Snapshot, error) {
	return s.node.CreateSnapshot(ctx, sandboxID, name)
}

func (s *service) ListSnapshots(ctx context.Context, f cube.SnapshotFilter, p cube.Page) ([]cube.Snapshot, *cube.Cursor, error) {
	return s.node.ListSnapshots(ctx, f, p)
}

// ForkSandbox clones a sandbox on this node while it takes new ones; in
// a cluster, on another node when this one does not.
func (s *service) ForkSandbox(ctx context.Context, id string, req cube.ForkRequest) ([]cube.ForkResult, error) {
	if err := s.nodes.AdmitNow(ctx); err != nil {
		if s.forkAway == nil {
			return nil, err
		}
		return s.forkAway(ctx, id, req, err)
	}
	return s.node.ForkSandbox(ctx, id, req)
}

func (s *service) RollbackSandbox(ctx context.Context, id, snapshotID string) (*cube.Rollback, error) {
	return s.node.RollbackSandbox(ctx, id, snapshotID)
}

// Templates.

func (s *service) ListTemplates(ctx context.Context, team string) ([]cube.Template, error) {
	return s.node.ListTemplates(ctx, team)
}

func (s *service) GetTemplate(ctx context.Context, team, idOrAlias string) (*cube.Template, error) {
	return s.node.GetTemplate(ctx, team, idOrAlias)
}

// DeleteTemplate deletes the template, then the build layers and trees
// that no template or sandbox needs any more.
func (s *service) DeleteTemplate(ctx context.Context, team, idOrAlias string) error {
	if err := s.node.DeleteTemplate(ctx, team, idOrAlias); err != nil {
		return err
	}
	if err := s.builder.CollectLayers(context.WithoutCancel(ctx)); err != nil {
		slog.Warn("collect build layers", "err", err)
	}
	return nil
}

// Volumes.

func (s *service) CreateVolume(ctx context.Context, team, name string, sizeBytes int64) (*cube.Volume, error) {
	return s.node.CreateVolume(ctx, team, name, sizeBytes)
}

func (s *service) ListVolumes(ctx context.Context, team string) ([]cube.Volume, error) {
	return s.node.ListVolumes(ctx, team)
}

func (s *service) GetVolume(ctx context.Context, id string) (*cube.Volume, error) {
	return s.node.GetVolume(ctx, id)
}

func (s *service) DeleteVolume(ctx context.Context, id string) error {
	return s.node.DeleteVolume(ctx, id)
}

func (s *service) VolumeFiles(ctx context.Context, id string) (cube.VolumeFiles, error) {
	return s.node.VolumeFiles(ctx, id)
}

func (s *service) DefaultVolumeBytes() int64 { return s.node.DefaultVolumeBytes() }
func (s *service) MaxVolumeBytes() int64     { return s.node.MaxVolumeBytes() }

// Template builds.

func (s *service) BuildTemplate(ctx context.Context, req cube.BuildRequest) (*cube.BuildJob, error) {
	return s.builder.BuildTemplate(ctx, req)
}

func (s *service) BuildJob(ctx context.Context, team, jobID string) (*cube.BuildJob, error) {
	return s.builder.BuildJob(ctx, team, jobID)
}

func (s *service) TemplateDetails(ctx context.Context) (map[string]cube.TemplateDetail, error) {
	return s.builder.TemplateDetails(ctx)
}

func (s *service) ImportArchive(ctx context.Context, kind string, body io.Reader) (string, error) {
	return s.builder.ImportArchive(ctx, kind, body)
}

func (s *service) MaxImportBytes() int64 { return s.builder.MaxImportBytes() }

func (s *service) RequestBuild(ctx context.Context, req cube.BuildIntent) (*cube.BuildTicket, error) {
	return s.builder.RequestBuild(ctx, req)
}

func (s *service) FilesPresent(ctx context.Context, team, templateID, hash string) (bool, error) {
	return s.builder.FilesPresent(ctx, team, templateID, hash)
}

func (s *service) PutFiles(ctx context.Context, templateID, hash string, body io.Reader, verify bool) error {
	return s.builder.PutFiles(ctx, templateID, hash, body, verify)
}

func (s *service) MaxFilesBytes() int64 { return s.builder.MaxFilesBytes() }

func (s *service) StartBuild(ctx context.Context, team, templateID, buildID string, spec cube.BuildSpec) error {
	return s.builder.StartBuild(ctx, team, templateID, buildID, spec)
}

func (s *service) BuildStatus(ctx context.Context, team, templateID, buildID string, logsOffset int) (*cube.BuildStatus, error) {
	return s.builder.BuildStatus(ctx, team, templateID, buildID, logsOffset)
}

func (s *service) BuildLogs(ctx context.Context, team, templateID, buildID string, q cube.BuildLogQuery) ([]cube.BuildLogEntry, error) {
	return s.builder.BuildLogs(ctx, team, templateID, buildID, q)
}

func (s *service) AssignTags(ctx context.Context, team, target string, tags []string) (string, error) {
	return s.builder.AssignTags(ctx, team, target, tags)
}

func (s *service) RemoveTags(ctx context.Context, team, name string, tags []string) error {
	return s.builder.RemoveTags(ctx, team, name, tags)
}

func (s *service) TemplateTags(ctx context.Context, team, idOrName string) ([]cube.TemplateTag, error) {
	return s.builder.TemplateTags(ctx, team, idOrName)
}

func (s *service) SetPublic(ctx context.Context, team, idOrName string, public bool) ([]string, error) {
	return s.builder.SetPublic(ctx, team, idOrName, public)
}

var _ cube.BuildCanceller = (*service)(nil)

// CancelBuilds stops the team's builds on this node, the one that runs
// the builds it was asked for.
func (s *service) CancelBuilds(ctx context.Context, team string) (cancelled, failed int, err error) {
	return s.builder.CancelBuilds(ctx, team)
}

// Nodes.

func (s *service) ListNodes(ctx context.Context) ([]cube.Node, error) { return s.nodes.ListNodes(ctx) }

func (s *service) GetNode(ctx context.Context, id string) (cube.Node, error) {
	return s.nodes.GetNode(ctx, id)
}

func (s *service) SetNodeStatus(ctx context.Context, id string, status cube.NodeStatus) error {
	return s.nodes.SetNodeStatus(ctx, id, status)
}

func (s *service) RemoveNode(ctx context.Context, id string) error {
	return s.nodes.RemoveNode(ctx, id)
}

// Secrets: the store keeps them in memory, sealed on disk, so they need
// no context. Each is its team's: the store finds, lists and fills rules
// with a team's own secrets only.

func (s *service) CreateSecret(_ context.Context, team, name, value string, metadata map[string]string) (cube.SecretInfo, error) {
	i, err := s.secrets.Create(team, name, value, metadata)
	return secretInfo(i), err
}

func (s *service) UpdateSecret(_ context.Context, team, ref, value string, metadata map[string]string) (cube.SecretInfo, error) {
	i, err := s.secrets.Update(team, ref, value, metadata)
	return secretInfo(i), err
}

func (s *service) GetSecret(_ context.Context, team, ref string) (cube.SecretInfo, error) {
	i, err := s.secrets.Get(team, ref)
	return secretInfo(i), err
}

func (s *service) ListSecrets(_ context.Context, team string) ([]cube.SecretInfo, error) {
	var out []cube.SecretInfo
	for _, i := range s.secrets.List(team) {
		out = append(out, secretInfo(i))
	}
	return out, nil
}

func (s *service) DeleteSecret(_ context.Context, team, ref string) error {
	return s.secrets.Delete(team, ref)
}

func secretInfo(i secrets.Info) cube.SecretInfo {
	return cube.SecretInfo{ID: i.ID, Team: i.Team, Name: i.Name, Version: i.Version, Metadata: i.Metadata, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}

// Usage: read from the store every node shares, so a team's usage covers
// the cluster whichever node answers.

func (s *service) TeamUsage(ctx context.Context, team string, start, end time.Time) (cube.UsageTotals, error) {
	return s.usage.TeamUsage(ctx, team, start, end)
}

func (s *service) TeamMetrics(ctx context.Context, team string, start, end time.Time, step time.Duration) ([]cube.TeamMetric, error) {
	return s.usage.TeamMetrics(ctx, team, start, end, step)
}

func (s *service) MaxTeamMetric(ctx context.Context, team string, start, end time.Time, metric string) (cube.MaxTeamMetric, error) {
	return s.usage.MaxTeamMetric(ctx, team, start, end, metric)
}
