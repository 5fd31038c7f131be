package api

import (
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/volume"
)

// VolumeFilePath is the route file uploads to a volume go to; its body
// limit is the largest volume's size, not the API's JSON limit.
const VolumeFilePath = "/volumecontent/{volumeID}/file"

// The persistent volume routes: E2B's /volumes, whose answers carry the
// token of the volume content routes (volumes_content.go).

func (s *Server) volumes() (cube.Volumes, error) {
	return capability[cube.Volumes](s, "volumes are")
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) error {
	vb, err := s.volumes()
	if err != nil {
		return err
	}
	var body wire.NewVolume
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if !volume.ValidName(body.Name) {
		return badRequest("name: volume name %q is invalid: use %s", body.Name, volume.NameRule)
	}
	var size int64
	if body.SizeMB != nil {
		maxMB := vb.MaxVolumeBytes() >> 20
		if *body.SizeMB < volume.MinBytes>>20 || *body.SizeMB > maxMB {
			return badRequest("sizeMB: %d is out of range: give %d to %d (the server's --max-volume-size)", *body.SizeMB, volume.MinBytes>>20, maxMB)
		}
		size = *body.SizeMB << 20
	}
	v, err := vb.CreateVolume(r.Context(), callerOf(r).Team, body.Name, size)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wireVolumeAndToken(v))
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	vb, err := s.volumes()
	if err != nil {
		return err
	}
	vs, err := vb.ListVolumes(r.Context(), callerOf(r).Team)
	if err != nil {
		return err
	}
	slices.SortFunc(vs, func(a, b cube.Volume) int { return strings.Compare(a.Name, b.Name) })
	out := make([]wire.Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, wire.Volume{VolumeID: v.ID, Name: v.Name, SizeMB: v.SizeBytes >> 20, CreatedAt: v.CreatedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) error {
	vb, err := s.volumes()
	if err != nil {
		return err
	}
	v, err := s.ownVolume(r, vb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireVolumeAndToken(v))
	return nil
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
	vb, err := s.volumes()
	if err != nil {
		return err
	}
	if _, err := s.ownVolume(r, vb); err != nil {
		return err
	}
	if err := vb.DeleteVolume(r.Context(), r.PathValue("volumeID")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ownVolume returns the volume the path names if it is the caller's
// team's; another team's is answered as one that does not exist.
func (s *Server) ownVolume(r *http.Request, vb cube.Volumes) (*cube.Volume, error) {
	id := r.PathValue("volumeID")
	v, err := vb.GetVolume(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if v.Team != callerOf(r).Team {
		return nil, cube.Errorf(cube.NotFound, "volume %q not found", id)
	}
	return v, nil
}

func wireVolumeAndToken(v *cube.Volume) wire.VolumeAndToken {
	out := wire.VolumeAndToken{VolumeID: v.ID, Name: v.Name, Token: v.Token, SizeMB: v.SizeBytes >> 20, CreatedAt: v.CreatedAt.UTC()}
	if v.UsedBytes > 0 {
		used := (v.UsedBytes + 1<<20 - 1) >> 20
		out.UsedMB = &used
	}
	return out
}

// volumeMounts validates a create request's volume mounts: known shape,
// paths a sandbox can spare, no overlaps, no volume twice.
func volumeMounts(in []wire.VolumeMount) ([]cube.VolumeMount, error) {
	if len(in) > volume.MaxMounts {
		return nil, badRequest("volumeMounts: %d mounts asked for, at most %d per sandbox", len(in), volume.MaxMounts)
	}
	var out []cube.VolumeMount
	for i, m := range in {
		if !volume.ValidName(m.Name) {
			return nil, badRequest("volumeMounts[%d].name: volume name %q is invalid: use %s", i, m.Name, volume.NameRule)
		}
		if err := volume.CheckMountPath(m.Path); err != nil {
			return nil, badRequest("volumeMounts[%d].path: %v", i, err)
		}
		for _, o := range out {
			if o.Name == m.Name {
				return nil, badRequest("volumeMounts[%d]: volume %q is mounted twice; mount each volume once", i, m.Name)
			}
			if err := volume.CheckOverlap(o.Path, m.Path); err != nil {
				return nil, badRequest("volumeMounts[%d].path: %v", i, err)
			}
		}
		out = append(out, cube.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly != nil && *m.ReadOnly})
	}
	return out, nil
}

func wireMounts(ms []cube.VolumeMount) []wire.VolumeMount {
	var out []wire.VolumeMount
	for _, m := range ms {
		wm := wire.VolumeMount{Name: m.Name, Path: m.Path}
		if m.ReadOnly {
			ro := true
			wm.ReadOnly = &ro
		}
		out = append(out, wm)
	}
	return out
}

// volumeToken reports whether r carries the content token of the volume
// its path names (/volumecontent/{volumeID}/...), and returns the caller
// it stands for: the volume's team, for that volume alone.
func (s *Server) volumeToken(pattern string, r *http.Request) (cube.Caller, bool) {
	if !strings.Contains(pattern, " /volumecontent/") {
		return cube.Caller{}, false
	}
	vb, ok := s.backend.(cube.Volumes)
	if !ok {
		return cube.Caller{}, false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/volumecontent/")
	if !ok {
		return cube.Caller{}, false
	}
	volumeID, _, _ := strings.Cut(rest, "/")
	tok := presentedKey(r)
	if tok == "" || !volume.ValidID(volumeID) {
		return cube.Caller{}, false
	}
	v, err := vb.GetVolume(r.Context(), volumeID)
	if err != nil || !equalTokens(tok, v.Token) {
		return cube.Caller{}, false
	}
	return cube.Caller{Team: v.Team, KeyName: "volume token"}, true
}

func equalTokens(a, b string) bool {
	ha, hb := HashAPIKey(a), HashAPIKey(b)
	return b != "" && subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
