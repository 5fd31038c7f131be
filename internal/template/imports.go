package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"cube/internal/cube"
	"cube/internal/id"
	"cube/internal/oci"
)

// Local image sources are read only from the import directory: the server
// runs as root, and a build request must not make it read (and turn into a
// template anyone with an API key can read back) an arbitrary file of its
// host. Clients elsewhere, or with files elsewhere, upload them into it.

// uploadPrefix starts the names of uploaded archives, which the builder
// owns: it removes them once a build from them ended, and at start.
const uploadPrefix = "upload-"

// staleUpload is how long an upload may wait for the build that uses it.
const staleUpload = time.Hour

// localPath resolves the path of a local source: relative to the import
// directory, or absolute inside it, and inside it also once every
// symbolic link is followed. A path that does not exist yet is returned
// as it is with an error wrapping fs.ErrNotExist.
func (b *Builder) localPath(src oci.Source) (string, error) {
	p := src.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(b.importDir, p)
	}
	p = filepath.Clean(p)
	real, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		// Judge by the deepest directory that exists.
		dir := filepath.Dir(p)
		for {
			if rd, derr := filepath.EvalSymlinks(dir); derr == nil {
				if !oci.WithinDir(b.importDir, rd) {
					return "", b.outsideError(src, "")
				}
				return p, fmt.Errorf("%w: %s does not exist in the import directory %s", oci.ErrNotFound, p, b.importDir)
			}
			if dir == filepath.Dir(dir) {
				return "", b.outsideError(src, "")
			}
			dir = filepath.Dir(dir)
		}
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", src, err)
	}
	if !oci.WithinDir(b.importDir, real) {
		if real != p {
			return "", b.outsideError(src, real)
		}
		return "", b.outsideError(src, "")
	}
	return real, nil
}

func (b *Builder) outsideError(src oci.Source, link string) error {
	what := src.Path
	if link != "" {
		what += " (a link to " + link + ")"
	}
	return cube.Errorf(cube.Invalid, "%s: %s is outside cube-server's import directory %s, the only place it reads local images from: put it there (a hard link or a rename is enough on the same file system) and name it by its path there, or let cubemastercli upload it (give `tpl create-from-image` the path on the machine cubemastercli runs on)",
		src, what, b.importDir)
}

// isUpload reports whether p is an uploaded archive.
func (b *Builder) isUpload(p string) bool {
	return filepath.Dir(p) == b.importDir && strings.HasPrefix(filepath.Base(p), uploadPrefix)
}

// MaxImportBytes implements cube.ArchiveImporter: an archive larger than
// the unpack limit could not become a template anyway.
func (b *Builder) MaxImportBytes() int64 { return b.cfg.Limits.MaxBytes }

// ImportArchive implements cube.ArchiveImporter: it stores body as an
// archive of kind (oci-archive or docker-archive) in the import directory
// and returns the image reference that builds from it. The file appears
// under its name only once complete; the first build from it removes it
// when it ends.
func (b *Builder) ImportArchive(ctx context.Context, kind string, body io.Reader) (string, error) {
	switch oci.Kind(kind) {
	case oci.KindOCIArchive, oci.KindDockerArchive:
	default:
		return "", cube.Errorf(cube.Invalid, "archive kind %q: want oci-archive or docker-archive (send an OCI layout directory as a tar of it, kind oci-archive)", kind).WithField("kind")
	}
	// Each upload may take up to MaxImportBytes of disk until it ends.
	select {
	case b.uploading <- struct{}{}:
		defer func() { <-b.uploading }()
	default:
		return "", cube.Errorf(cube.Capacity, "%d archive uploads are already under way; retry when one has finished", cap(b.uploading)).WithRetryAfter(10 * time.Second)
	}
	b.sweepUploads(staleUpload)
	tmp, err := os.CreateTemp(b.importDir, ".tmp-"+uploadPrefix+"*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	// Uploads nobody has built from yet stay on disk (for up to an hour),
	// so all of them together get at most two images' worth.
	max := b.MaxImportBytes()
	limit := min(max, 2*max-b.uploadBytes())
	full := cube.Errorf(cube.Capacity, "uploaded archives no build has used yet fill the upload space (%s): build from them, remove them from %s, or retry once they expire after an hour",
		oci.HumanBytes(2*max), b.importDir).WithRetryAfter(time.Minute)
	if limit <= 0 {
		return "", full
	}
	n, err := io.Copy(tmp, io.LimitReader(body, limit+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err == nil:
	case cube.KindOf(err) != 0:
		return "", fmt.Errorf("receiving the archive: %w", err)
	case errors.Is(err, syscall.ENOSPC):
		return "", cube.Errorf(cube.DiskFull, "receiving the archive: the disk of %s is full: free space or delete templates and snapshots", b.importDir)
	default:
		return "", cube.Errorf(cube.Invalid, "receiving the archive: %v: the upload was cut off; send it again", err)
	}
	if n > limit {
		if limit < max {
			return "", full
		}
		return "", cube.Errorf(cube.TooLarge, "the archive is larger than %s, the most an image may unpack to: raise it with cube-server --max-image-bytes", oci.HumanBytes(max))
	}
	if n == 0 {
		return "", cube.Errorf(cube.Invalid, "the archive is empty")
	}
	final := filepath.Join(b.importDir, uploadPrefix+id.New("", 20)+".tar")
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", err
	}
	b.log.Info("image archive uploaded", "path", final, "bytes", n)
	return kind + ":" + final, nil
}

// uploadBytes is what the uploads in the import directory hold, partial
// ones included.
func (b *Builder) uploadBytes() int64 {
	ents, err := os.ReadDir(b.importDir)
	if err != nil {
		return 0
	}
	var sum int64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, uploadPrefix) && !strings.HasPrefix(name, ".tmp-"+uploadPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil {
			sum += info.Size()
		}
	}
	return sum
}

// sweepUploads removes uploads (and partial ones) older than age; 0
// removes them all.
func (b *Builder) sweepUploads(age time.Duration) {
	ents, err := os.ReadDir(b.importDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, uploadPrefix) && !strings.HasPrefix(name, ".tmp-"+uploadPrefix) {
			continue
		}
		b.mu.Lock()
		busy := b.uploadsInUse[filepath.Join(b.importDir, name)] > 0
		b.mu.Unlock()
		if busy {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) >= age {
			os.Remove(filepath.Join(b.importDir, name))
		}
	}
}
