package template

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"cube/internal/cube"
	"cube/internal/id"
	"cube/internal/oci"
	"cube/internal/store"
)

// The files of a build's COPY steps are uploaded before the build starts,
// each archive under the SHA-256 that names it in the step, and kept per
// template: a rebuild that copies the same files uploads nothing.

var hashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (b *Builder) filesDir() string { return filepath.Join(b.cfg.DataDir, "buildfiles") }

// filesPath is where the files of a COPY step are kept: per template, so
// that an upload can serve only builds of the template it was made for.
func (b *Builder) filesPath(templateID, hash string) string {
	return filepath.Join(b.filesDir(), templateID, hash+".tar")
}

// FilesPresent implements cube.StepBuilder. Files are uploaded for a
// build of the team's own template: another team's private template is
// not found, its public one Forbidden (it can be used, not built).
func (b *Builder) FilesPresent(ctx context.Context, team, templateID, hash string) (bool, error) {
	if !hashPattern.MatchString(hash) {
		return false, cube.Errorf(cube.Invalid, "invalid files hash %q: want 64 hex digits", hash)
	}
	if !id.ValidName(templateID) {
		return false, cube.Errorf(cube.NotFound, "template %q not found", templateID)
	}
	t, err := b.st.Templates().Get(ctx, templateID)
	if err == nil && !t.VisibleTo(team) {
		err = store.ErrNotFound
	}
	if err != nil {
		return false, notFound(err, "template %q not found", templateID)
	}
	if !owns(team, t) {
		return false, cube.Errorf(cube.Forbidden, "template %q is another team's public template: it can be used, not built", templateID)
	}
	_, err = os.Stat(b.filesPath(templateID, hash))
	return err == nil, nil
}

// MaxFilesBytes implements cube.StepBuilder.
func (b *Builder) MaxFilesBytes() int64 { return b.cfg.MaxFilesBytes }

// PutFiles implements cube.StepBuilder. The archive is stored as a plain
// tar (a gzipped one is unpacked on the way in), checked entry by entry,
// and published under its hash only once complete (and, with verify, only
// if the tar's SHA-256 is the hash). Files already published under the
// hash stay: the first complete upload is the one builds use, so a later
// upload under the same name, from whatever link, cannot swap them.
func (b *Builder) PutFiles(ctx context.Context, templateID, hash string, body io.Reader, verify bool) error {
	// The link's signature is the upload's authority (see
	// cube.StepBuilder.PutFiles): the template is checked as the node
	// sees it.
	if _, err := b.FilesPresent(ctx, "", templateID, hash); err != nil {
		return err
	}
	dir := filepath.Dir(b.filesPath(templateID, hash))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	br := bufio.NewReader(body)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return cube.Errorf(cube.Invalid, "the files are not a valid gzip archive: %v", err)
		}
		src = zr
	}
	limited := &io.LimitedReader{R: src, N: b.cfg.MaxFilesBytes + 1}
	sum := sha256.New()
	tee := io.TeeReader(limited, io.MultiWriter(tmp, sum))
	tr := tar.NewReader(tee)
	for {
		_, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if limited.N <= 0 {
			return cube.Errorf(cube.TooLarge, "the files are larger than %s unpacked, the most a copy step takes", oci.HumanBytes(b.cfg.MaxFilesBytes))
		}
		if err != nil {
			return cube.Errorf(cube.Invalid, "the files are not a tar archive: %v", err)
		}
	}
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return err
	}
	if limited.N <= 0 {
		return cube.Errorf(cube.TooLarge, "the files are larger than %s unpacked, the most a copy step takes", oci.HumanBytes(b.cfg.MaxFilesBytes))
	}
	if got := hex.EncodeToString(sum.Sum(nil)); verify && got != strings.ToLower(hash) {
		return cube.Errorf(cube.Invalid, "the files' SHA-256 is %s, which does not match %s, the hash the upload link names: the upload is discarded", got, hash)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	// A hard link publishes the files only where none are: unlike a
	// rename, it never replaces what an earlier upload stored.
	if err := os.Link(tmp.Name(), b.filesPath(templateID, hash)); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// stageFiles puts a COPY step's uploaded tar where copyScript finds it.
func stageFiles(upper, files string) error {
	dir := filepath.Join(upper, ".cube-copy")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	// A copy, never a link: the sandbox writes to what it is given, and
	// the stored upload serves later builds.
	in, err := os.Open(files)
	if err != nil {
		return fmt.Errorf("the files of this step were not uploaded: %w", err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "files.tar"))
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// notFound turns the store's ErrNotFound into a NotFound error.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return cube.Errorf(cube.NotFound, format, args...)
	}
	return err
}
