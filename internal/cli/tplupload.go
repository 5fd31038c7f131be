package cli

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/schollz/progressbar/v3"

	"cube/internal/api/wire"
	"cube/internal/client"
)

// The server reads local images only from its import directory. An image
// given as a path on this machine, outside that directory, is uploaded to
// it first: that works whether the server runs here or elsewhere.

// importsPath is the server's upload route.
const importsPath = "/templates/imports"

// localImage is a local image reference: its kind prefix, path and tag.
type localImage struct {
	kind, path, tag string
}

// parseLocalImage recognises oci-archive:PATH[:TAG], oci:DIR[:TAG] and
// docker-archive:PATH; ok is false for registry references.
func parseLocalImage(ref string) (li localImage, ok bool) {
	ref = strings.TrimSpace(ref)
	for _, kind := range []string{"oci-archive", "docker-archive", "oci"} {
		rest, found := strings.CutPrefix(ref, kind+":")
		if !found || rest == "" {
			continue
		}
		li = localImage{kind: kind, path: rest}
		if kind != "docker-archive" {
			// The server's rule: a last ":x" without a slash is a tag.
			if i := strings.LastIndex(rest, ":"); i > 0 && i < len(rest)-1 && !strings.Contains(rest[i+1:], "/") {
				li.path, li.tag = rest[:i], rest[i+1:]
			}
		}
		return li, true
	}
	return localImage{}, false
}

// uploadTarget decides what becomes of a local image reference: "" keeps
// it as it is (a registry reference, a path that does not exist here and so
// names one in the server's import directory, or one under importDir,
// the server's import directory when it runs on this machine); otherwise
// the path to upload.
func uploadTarget(li localImage, importDir string) (string, error) {
	abs, err := filepath.Abs(li.path)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if dir, err := filepath.EvalSymlinks(importDir); err == nil {
		if rel, err := filepath.Rel(dir, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return "", nil
		}
	}
	return real, nil
}

// uploadImage streams the archive (or, for oci:, a tar of the layout
// directory) at p to the server with a progress bar on w, and returns the
// image reference the server answered, with li's tag.
func uploadImage(ctx context.Context, c *client.Client, li localImage, p string, w io.Writer) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	kind := li.kind
	var body io.Reader
	size := st.Size()
	switch {
	case kind == "oci" && !st.IsDir():
		return "", fmt.Errorf("%s is not a directory (an OCI layout is a directory; use oci-archive: for a tar)", li.path)
	case kind != "oci" && st.IsDir():
		return "", fmt.Errorf("%s is a directory, not an archive (use oci:%s for a layout directory)", li.path, li.path)
	case kind == "oci":
		// A tar of a layout directory is an oci-archive.
		kind, size = "oci-archive", tarSize(p)
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDir(p, pw)) }()
		defer pr.Close()
		body = pr
	default:
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		body = f
	}
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetDescription(fmt.Sprintf("%-12s", "UPLOADING")),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetRenderBlankState(true),
	)
	counted := io.TeeReader(body, progress{bar})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+importsPath+"?"+url.Values{"kind": {kind}}.Encode(), counted)
	if err != nil {
		return "", err
	}
	if kind == li.kind {
		req.ContentLength = size // a file's size is known; a directory's tar is streamed
	}
	req.Header.Set("X-API-Key", c.APIKey)
	req.Header.Set("Content-Type", "application/x-tar")
	req.Header.Set("Accept", "application/json")
	// The client's timeout suits API calls, not an upload of gigabytes.
	hc := &http.Client{Transport: c.HTTP.Transport}
	res, err := hc.Do(req)
	if err == nil && res.StatusCode == http.StatusCreated {
		bar.Finish()
	} else {
		bar.Exit()
	}
	fmt.Fprintln(w)
	if err != nil {
		return "", fmt.Errorf("uploading %s: %w", li.path, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode != http.StatusCreated {
		var e wire.Error
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			msg = e.Message
		}
		return "", fmt.Errorf("uploading %s: %w", li.path, &client.APIError{Status: res.StatusCode, Message: msg})
	}
	var out struct {
		Image string `json:"image"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Image == "" {
		return "", fmt.Errorf("uploading %s: unexpected answer %q", li.path, data)
	}
	if li.tag != "" {
		out.Image += ":" + li.tag
	}
	return out.Image, nil
}

// progress feeds a progress bar; a bar that runs past its end (a file
// that grew) must not fail the upload.
type progress struct{ bar *progressbar.ProgressBar }

func (p progress) Write(b []byte) (int, error) {
	p.bar.Add(len(b))
	return len(b), nil
}

// tarSize is about the size of tarDir's output, for the progress bar: a
// header block per entry, file data padded to blocks, two end blocks.
func tarSize(dir string) int64 {
	n := int64(1024)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			n += 512
			if info, err := os.Stat(p); err == nil && info.Mode().IsRegular() {
				n += (info.Size() + 511) / 512 * 512
			}
		}
		return nil
	})
	return n
}

// tarDir writes the directories and regular files under dir to w as a
// tar, names relative to dir. An OCI layout holds nothing else; a symbolic
// link in it is followed to the file it names.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case info.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: info.ModTime()})
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: info.Size(), ModTime: info.ModTime()}); err != nil {
				return err
			}
			if _, err := io.CopyN(tw, f, info.Size()); err != nil {
				return fmt.Errorf("%s changed while being sent: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
