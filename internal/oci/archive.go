package oci

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// ArchiveOptions tune WriteArchive.
type ArchiveOptions struct {
	// Tag is the image's ref name inside the archive; default "latest".
	Tag string
	// Gzip compresses the layer (at gzip's fastest level). Without it the
	// file is about 2.5 times bigger but costs no CPU to write or unpack.
	Gzip bool
	// Created stamps the config; zero means now.
	Created time.Time
}

// WriteArchive packs the tree at dir into a single-layer linux/amd64 image
// and writes it to out as an oci-archive (a tar of an OCI image layout).
// Ownership, modes (setuid included), symlinks, hard links, mtimes and file
// capabilities are kept as they are on disk, so dir should be the result of
// a root-run build such as debootstrap. out appears only when complete.
func WriteArchive(dir, out string, cfg ImageConfig, opts ArchiveOptions) error {
	if opts.Tag == "" {
		opts.Tag = "latest"
	}
	if opts.Created.IsZero() {
		opts.Created = time.Now().UTC()
	}
	if st, err := os.Stat(dir); err != nil {
		return err
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	outDir := filepath.Dir(out)
	layerFile, err := os.CreateTemp(outDir, ".layer-*")
	if err != nil {
		return err
	}
	defer os.Remove(layerFile.Name())
	defer layerFile.Close()

	layer, err := writeLayer(dir, layerFile, opts.Gzip)
	if err != nil {
		return err
	}

	cf := v1.ConfigFile{
		Created:      v1.Time{Time: opts.Created},
		Architecture: "amd64",
		OS:           "linux",
		Config: v1.Config{
			Entrypoint: cfg.Entrypoint,
			Cmd:        cfg.Cmd,
			Env:        cfg.Env,
			WorkingDir: cfg.WorkingDir,
			User:       cfg.User,
		},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{layer.diffID}},
		History: []v1.History{{Created: v1.Time{Time: opts.Created}, CreatedBy: "cube WriteArchive " + dir}},
	}
	if len(cfg.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range cfg.ExposedPorts {
			cf.Config.ExposedPorts[strconv.Itoa(p)+"/tcp"] = struct{}{}
		}
	}
	cfgRaw, err := json.Marshal(cf)
	if err != nil {
		return err
	}
	cfgDesc := descriptorOf(types.OCIConfigJSON, cfgRaw)
	mt := types.OCIUncompressedLayer
	if opts.Gzip {
		mt = types.OCILayer
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        cfgDesc,
		Layers:        []v1.Descriptor{{MediaType: mt, Size: layer.size, Digest: layer.digest}},
	}
	mRaw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	mDesc := descriptorOf(types.OCIManifestSchema1, mRaw)
	mDesc.Annotations = map[string]string{refNameAnnotation: opts.Tag}
	mDesc.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{mDesc}}
	idxRaw, err := json.Marshal(idx)
	if err != nil {
		return err
	}

	tmp, err := os.CreateTemp(outDir, "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	tw := tar.NewWriter(tmp)
	mtime := opts.Created
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	small := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxRaw},
		{blobName(cfgDesc.Digest), cfgRaw},
		{blobName(mDesc.Digest), mRaw},
	}
	for _, f := range small {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: blobName(layer.digest), Mode: 0o644, Size: layer.size, ModTime: mtime}); err != nil {
		return err
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layerFile); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

func descriptorOf(mt types.MediaType, b []byte) v1.Descriptor {
	return v1.Descriptor{
		MediaType: mt,
		Size:      int64(len(b)),
		Digest:    v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))},
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

type layerInfo struct {
	diffID, digest v1.Hash
	size           int64
}

func hashOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}
}

// writeLayer tars dir into w (gzipped if asked) and returns its digests.
func writeLayer(dir string, w io.Writer, gz bool) (layerInfo, error) {
	diffH, digestH, cnt := sha256.New(), sha256.New(), &countWriter{}
	blobW := io.MultiWriter(w, digestH, cnt)
	var tarOut io.Writer
	var zw *gzip.Writer
	if gz {
		zw, _ = gzip.NewWriterLevel(blobW, gzip.BestSpeed)
		tarOut = io.MultiWriter(zw, diffH)
	} else {
		tarOut = io.MultiWriter(blobW, diffH)
	}
	tw := tar.NewWriter(tarOut)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat data", p)
		}
		h := &tar.Header{
			Name: rel,
			Mode: int64(st.Mode & 0o7777),
			Uid:  int(st.Uid),
			Gid:  int(st.Gid),
			// Whole seconds keep most headers plain ustar; sub-second
			// times would add a PAX record to every file.
			ModTime: time.Unix(st.Mtim.Sec, 0),
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case syscall.S_IFREG:
			key := inode{uint64(st.Dev), st.Ino}
			if first, ok := seen[key]; ok && st.Nlink > 1 {
				h.Typeflag, h.Linkname = tar.TypeLink, first
			} else {
				seen[key] = rel
				h.Typeflag, h.Size = tar.TypeReg, st.Size
			}
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case syscall.S_IFCHR, syscall.S_IFBLK:
			h.Typeflag = tar.TypeChar
			if st.Mode&syscall.S_IFMT == syscall.S_IFBLK {
				h.Typeflag = tar.TypeBlock
			}
			h.Devmajor, h.Devminor = int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev)))
		case syscall.S_IFIFO:
			h.Typeflag = tar.TypeFifo
		default:
			slog.Info("leaving socket out of the image", "path", "/"+rel)
			return nil
		}
		if h.Typeflag != tar.TypeSymlink && h.Typeflag != tar.TypeLink {
			if cp, err := getxattr(p, "security.capability"); err == nil && len(cp) > 0 {
				h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(cp)}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, h.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s changed while being archived: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return layerInfo{}, err
	}
	if err := tw.Close(); err != nil {
		return layerInfo{}, err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return layerInfo{}, err
		}
	}
	return layerInfo{diffID: hashOf(diffH), digest: hashOf(digestH), size: cnt.n}, nil
}

func getxattr(p, attr string) ([]byte, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, attr, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}
