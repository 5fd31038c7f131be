package api

import (
	"io"
	"net/http"
	"os"
	"strconv"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// The volume content routes, where the SDKs' Volume file methods go
// (E2B's openapi-volumecontent). They accept the volume's own token (or
// the API key); every path is resolved inside the volume's root.

// withFiles opens the volume the request names and calls fn with it.
func (s *Server) withFiles(r *http.Request, fn func(cube.VolumeFiles, string) error) error {
	vb, err := s.volumes()
	if err != nil {
		return err
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		return badRequest("path: the query parameter path is required (the volume's root is /)")
	}
	if _, err := s.ownVolume(r, vb); err != nil {
		return err
	}
	files, err := vb.VolumeFiles(r.Context(), r.PathValue("volumeID"))
	if err != nil {
		return err
	}
	defer files.Close()
	return fn(files, p)
}

func (s *Server) volumeStat(w http.ResponseWriter, r *http.Request) error {
	return s.withFiles(r, func(f cube.VolumeFiles, p string) error {
		e, err := f.Stat(p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wireEntry(e))
		return nil
	})
}

func (s *Server) volumeSetAttr(w http.ResponseWriter, r *http.Request) error {
	var body wire.VolumeAttr
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if body.Mode != nil && *body.Mode > 0o7777 {
		return badRequest("mode: %o is not a permission mode (at most 07777)", *body.Mode)
	}
	return s.withFiles(r, func(f cube.VolumeFiles, p string) error {
		e, err := f.SetAttr(p, cube.VolumeAttr{UID: body.UID, GID: body.GID, Mode: body.Mode})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wireEntry(e))
		return nil
	})
}

func (s *Server) volumeRemove(w http.ResponseWriter, r *http.Request) error {
	return s.withFiles(r, func(f cube.VolumeFiles, p string) error {
		if err := f.Remove(p); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) volumeList(w http.ResponseWriter, r *http.Request) error {
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil {
			return badRequest("depth: %q is not a number", v)
		}
		depth = d
	}
	return s.withFiles(r, func(f cube.VolumeFiles, p string) error {
		es, err := f.List(p, depth)
		if err != nil {
			return err
		}
		out := make([]wire.VolumeEntryStat, 0, len(es))
		for i := range es {
			out = append(out, wireEntry(&es[i]))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) volumeMakeDir(w http.ResponseWriter, r *http.Request) error {
	opts, err := writeOptions(r)
	if err != nil {
		return err
	}
	return s.withFiles(r, func(f cube.VolumeFiles, p string) error {
		e, err := f.MakeDir(p, opts)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, wireEntry(e))
		return nil
	})
}

func (s *Server) volumeReadFile(w http.ResponseWriter, r *http.Request) error {
	return s.withFiles(r, func(f cube.VolumeFiles, p string) error {
		rc, e, err := f.ReadFile(p)
		if err != nil {
			return err
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(e.Size, 10))
		w.WriteHeader(http.StatusOK)
		_, err = io.Copy(w, rc)
		if err != nil {
			s.log.Warn("volume read: copy to client", "path", p, "err", err)
		}
		return nil
	})
}

func (s *Server) volumeWriteFile(w http.ResponseWriter, r *http.Request) error {
	opts, err := writeOptions(r)
	if err != nil {
		return err
	}
	return s.withFiles(r, func(f cube.VolumeFiles, p string) error {
		e, err := f.WriteFile(p, r.Body, opts)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, wireEntry(e))
		return nil
	})
}

// writeOptions reads uid, gid, mode and force from the query.
func writeOptions(r *http.Request) (cube.VolumeWrite, error) {
	q := r.URL.Query()
	var o cube.VolumeWrite
	for _, f := range []struct {
		name string
		dst  **uint32
		max  uint64
	}{{"uid", &o.UID, 1<<32 - 2}, {"gid", &o.GID, 1<<32 - 2}, {"mode", &o.Mode, 0o7777}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n > f.max {
			return o, badRequest("%s: %q is not a number from 0 to %d", f.name, v, f.max)
		}
		u := uint32(n)
		*f.dst = &u
	}
	if v := q.Get("force"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, badRequest("force: %q is not true or false", v)
		}
		o.Force = b
	}
	return o, nil
}

func wireEntry(e *cube.VolumeEntry) wire.VolumeEntryStat {
	mode := uint32(e.Mode.Perm())
	if e.Mode&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if e.Mode&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if e.Mode&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return wire.VolumeEntryStat{Name: e.Name, Type: e.Type, Path: e.Path, Size: e.Size, Mode: mode,
		UID: e.UID, GID: e.GID, Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime, Target: e.Target}
}
