package api

import (
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

func (s *Server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

func (s *Server) wireSandbox(sb *cube.Sandbox) wire.Sandbox {
	out := wire.Sandbox{
		TemplateID:      sb.TemplateID,
		SandboxID:       sb.ID,
		ClientID:        s.clientID(sb),
		EnvdVersion:     sb.EnvdVersion,
		Alias:           sb.Alias,
		EnvdAccessToken: sb.EnvdAccessToken,
		Domain:          s.domain(),
	}
	if sb.TrafficAccessToken != "" {
		t := sb.TrafficAccessToken
		out.TrafficAccessToken = &t
	}
	return out
}

func wireNetwork(n cube.Network) *wire.NetworkConfig {
	if len(n.AllowOut) == 0 && len(n.DenyOut) == 0 && n.AllowPublicTraffic == nil && n.MaskRequestHost == "" && len(n.Rules) == 0 && len(n.HTTPSPorts) == 0 {
		return nil
	}
	return &wire.NetworkConfig{
		AllowOut:           n.AllowOut,
		DenyOut:            n.DenyOut,
		AllowPublicTraffic: n.AllowPublicTraffic,
		MaskRequestHost:    n.MaskRequestHost,
		HTTPSPorts:         n.HTTPSPorts,
		Rules:              wireRules(n.Rules),
	}
}

func (s *Server) wireDetail(sb *cube.Sandbox) wire.SandboxDetail {
	onTimeout := "kill"
	if sb.AutoPause {
		onTimeout = "pause"
	}
	return wire.SandboxDetail{
		TemplateID:          sb.TemplateID,
		SandboxID:           sb.ID,
		ClientID:            s.clientID(sb),
		Alias:               sb.Alias,
		StartedAt:           sb.StartedAt.UTC(),
		EndAt:               sb.EndAt.UTC(),
		EnvdVersion:         sb.EnvdVersion,
		EnvdAccessToken:     sb.EnvdAccessToken,
		CPUCount:            sb.CPUCount,
		MemoryMB:            sb.MemoryMB,
		DiskSizeMB:          sb.DiskSizeMB,
		State:               string(sb.State),
		Metadata:            sb.Metadata,
		Domain:              s.domain(),
		AllowInternetAccess: sb.Network.AllowInternetAccess,
		Network:             wireNetwork(sb.Network),
		Lifecycle:           &wire.Lifecycle{OnTimeout: onTimeout, AutoResume: sb.AutoResume},
		VolumeMounts:        wireMounts(sb.VolumeMounts),
	}
}

// wireListedAll answers a page of sandboxes for both list routes; it is
// never nil, so an empty page is [] rather than null.
func (s *Server) wireListedAll(items []cube.Sandbox) []wire.ListedSandbox {
	out := make([]wire.ListedSandbox, 0, len(items))
	for i := range items {
		out = append(out, s.wireListed(&items[i]))
	}
	return out
}

func (s *Server) wireListed(sb *cube.Sandbox) wire.ListedSandbox {
	return wire.ListedSandbox{
		TemplateID:   sb.TemplateID,
		SandboxID:    sb.ID,
		ClientID:     s.clientID(sb),
		Alias:        sb.Alias,
		StartedAt:    sb.StartedAt.UTC(),
		EndAt:        sb.EndAt.UTC(),
		EnvdVersion:  sb.EnvdVersion,
		CPUCount:     sb.CPUCount,
		MemoryMB:     sb.MemoryMB,
		DiskSizeMB:   sb.DiskSizeMB,
		State:        string(sb.State),
		Metadata:     sb.Metadata,
		VolumeMounts: wireMounts(sb.VolumeMounts),
	}
}

func wireMetric(m cube.Metric) wire.SandboxMetric {
	return wire.SandboxMetric{
		Timestamp:     m.Time.UTC(),
		TimestampUnix: m.Time.Unix(),
		CPUCount:      m.CPUCount,
		CPUUsedPct:    m.CPUUsedPct,
		MemUsed:       m.MemUsed,
		MemTotal:      m.MemTotal,
		MemCache:      m.MemCache,
		DiskUsed:      m.DiskUsed,
		DiskTotal:     m.DiskTotal,
	}
}

func wireLogEntry(e cube.LogEntry) wire.SandboxLogEntry {
	fields := e.Fields
	if fields == nil {
		fields = map[string]string{}
	}
	level := e.Level
	if level == "" {
		level = cube.LevelInfo
	}
	return wire.SandboxLogEntry{Timestamp: e.Time.UTC(), Level: string(level), Message: e.Message, Fields: fields}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func wireTemplate(t *cube.Template) wire.Template {
	status := t.BuildStatus
	if status == "" {
		status = "ready"
	}
	return wire.Template{
		TemplateID:    t.ID,
		BuildID:       t.BuildID,
		BuildStatus:   status,
		BuildCount:    t.BuildCount,
		CPUCount:      t.CPUCount,
		MemoryMB:      t.MemoryMB,
		DiskSizeMB:    t.DiskSizeMB,
		EnvdVersion:   t.EnvdVersion,
		Public:        t.Public,
		Aliases:       nonNil(t.Aliases),
		Names:         nonNil(t.Aliases),
		CreatedAt:     t.CreatedAt.UTC(),
		UpdatedAt:     t.UpdatedAt.UTC(),
		LastSpawnedAt: timePtr(t.LastSpawnedAt),
		SpawnCount:    t.SpawnCount,
	}
}

func wireTemplateWithBuilds(t *cube.Template) wire.TemplateWithBuilds {
	status := t.BuildStatus
	if status == "" {
		status = "ready"
	}
	builds := []wire.TemplateBuild{}
	if t.BuildID != "" {
		b := wire.TemplateBuild{
			BuildID:     t.BuildID,
			Status:      status,
			CPUCount:    t.CPUCount,
			MemoryMB:    t.MemoryMB,
			DiskSizeMB:  t.DiskSizeMB,
			EnvdVersion: t.EnvdVersion,
			CreatedAt:   t.CreatedAt.UTC(),
			UpdatedAt:   t.UpdatedAt.UTC(),
		}
		if status == "ready" || status == "error" {
			b.FinishedAt = timePtr(t.UpdatedAt)
		}
		builds = append(builds, b)
	}
	return wire.TemplateWithBuilds{
		TemplateID:    t.ID,
		Public:        t.Public,
		Aliases:       nonNil(t.Aliases),
		Names:         nonNil(t.Aliases),
		CreatedAt:     t.CreatedAt.UTC(),
		UpdatedAt:     t.UpdatedAt.UTC(),
		LastSpawnedAt: timePtr(t.LastSpawnedAt),
		SpawnCount:    t.SpawnCount,
		Builds:        builds,
	}
}

func wireSnapshot(sn *cube.Snapshot) wire.SnapshotInfo {
	return wire.SnapshotInfo{
		SnapshotID: sn.ID,
		Names:      nonNil(sn.Names),
		SandboxID:  sn.SandboxID,
		CreatedAt:  timePtr(sn.CreatedAt),
		SizeBytes:  sn.SizeBytes,
	}
}

// clientID is E2B's clientID of a sandbox: the node that runs it, where
// the node is named.
func (s *Server) clientID(sb *cube.Sandbox) string {
	if sb.Node != "" {
		return sb.Node
	}
	return s.cfg.ClientID
}
