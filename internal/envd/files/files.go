// Package files serves envd's plain-HTTP file transfer: GET /files streams a
// file out, POST /files writes one or several files in. Both act as the
// requesting user and accept either the access token or a signed URL, so a
// browser can be handed a link without the token.
package files

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"cube/internal/envd/filesystem"
	"cube/internal/envd/protocol"
	"cube/internal/envd/state"
	"cube/internal/envd/users"
)

// Handler serves /files.
type Handler struct {
	state *state.State
	log   *slog.Logger
	now   func() time.Time
}

// New returns the /files handler.
func New(st *state.State, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.Default()
	}
	return &Handler{state: st, log: log, now: time.Now}
}

// WrittenFile is one element of the upload response.
type WrittenFile struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.download(w, r)
	case http.MethodPost:
		h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on /files", r.Method)
	}
}

// grant says how a request was admitted.
type grant struct {
	// signed is set when a URL signature, not the access token, admitted
	// the request; signedUser is then the username the signature covers,
	// the only account the request may act as.
	signed     bool
	signedUser string
}

// authorize admits a request carrying the access token or a valid signature
// for this path, operation and user.
func (h *Handler) authorize(r *http.Request, operation string) (grant, error) {
	token := h.state.Token()
	if token == "" || h.state.Authorized(r.Header.Get(protocol.HeaderAccessToken)) {
		return grant{}, nil
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return grant{}, errors.New("missing or invalid access token")
	}
	user := q.Get("username")
	if err := verify(sig, q.Get("signature_expiration"), q.Get("path"), operation, user, token, h.now()); err != nil {
		return grant{}, err
	}
	return grant{signed: true, signedUser: user}, nil
}

// user resolves the acting account. A signed URL acts as the user it was
// signed for (the default user when it names none) whatever the headers
// say; otherwise the username parameter, else the Authorization header,
// else the default user.
func (h *Handler) user(r *http.Request, g grant) (*users.User, error) {
	if g.signed {
		return h.state.User(g.signedUser)
	}
	if name := r.URL.Query().Get("username"); name != "" {
		return h.state.User(name)
	}
	return h.state.UserFromHeader(r.Header)
}

func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	g, err := h.authorize(r, "read")
	if err != nil {
		writeError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	u, err := h.user(r, g)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "the path parameter is required")
		return
	}
	path, err := h.state.Path(u, p)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	var f *os.File
	err = u.Do(func() (err error) {
		f, err = os.Open(path)
		return err
	})
	if err != nil {
		writeFSError(w, path, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeFSError(w, path, err)
		return
	}
	if fi.IsDir() {
		writeError(w, http.StatusBadRequest, "path %s is a directory", path)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(path)}))
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		if r.Method == http.MethodHead {
			return
		}
		zw := gzip.NewWriter(w)
		if _, err := io.Copy(zw, f); err != nil {
			h.log.Warn("download interrupted", "path", path, "err", err)
			return
		}
		zw.Close()
		return
	}
	if fi.Size() == 0 {
		// Clients tell an empty file by its Content-Length, which
		// ServeContent leaves out for an empty body.
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

func acceptsGzip(v string) bool {
	for _, part := range strings.Split(v, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && !strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") {
			return true
		}
	}
	return false
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	g, err := h.authorize(r, "write")
	if err != nil {
		writeError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	u, err := h.user(r, g)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	md, err := metadataHeaders(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	query := r.URL.Query().Get("path")
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "request body is not gzip: %v", err)
			return
		}
		defer zr.Close()
		body = zr
	default:
		writeError(w, http.StatusBadRequest, "unsupported Content-Encoding %q", enc)
		return
	}

	var written []WrittenFile
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType == "multipart/form-data" {
		mr, err := multipartReader(body, params)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, "malformed multipart body: %v", err)
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			dest := query
			if dest == "" {
				dest = rawFileName(part.Header.Get("Content-Disposition"))
			} else if len(written) > 0 {
				writeError(w, http.StatusBadRequest, "the path parameter names one file, but the body holds several; give each part its path as filename instead")
				return
			}
			if dest == "" {
				writeError(w, http.StatusBadRequest, "a file part has no destination: set the path parameter or the part's filename")
				return
			}
			wf, status, err := h.write(u, dest, part, md)
			part.Close()
			if err != nil {
				writeError(w, status, "%v", err)
				return
			}
			written = append(written, wf)
		}
		if len(written) == 0 {
			writeError(w, http.StatusBadRequest, "the multipart body has no part named \"file\"")
			return
		}
	} else {
		if query == "" {
			writeError(w, http.StatusBadRequest, "the path parameter is required for a raw upload")
			return
		}
		wf, status, err := h.write(u, query, body, md)
		if err != nil {
			writeError(w, status, "%v", err)
			return
		}
		written = append(written, wf)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(written)
}

// write stores src at dest (a client path) for u. The file is written in
// place, in the steps E2B's agent takes, so a client watching the
// directory sees the events it would there (under the file's own name): a
// new file is created, given to u (an attribute change, CHMOD) and written;
// a file that was there is given to u, then truncated and written (CHMOD,
// then WRITE once or twice as the kernel merges them). If the upload fails
// part way (a full disk, a dropped connection) the file is removed, so no
// truncated file is ever left behind.
func (h *Handler) write(u *users.User, dest string, src io.Reader, md map[string]string) (WrittenFile, int, error) {
	path, err := h.state.Path(u, dest)
	if err != nil {
		return WrittenFile{}, http.StatusBadRequest, err
	}
	// Missing parents are created by envd and given to u, as E2B's agent
	// does; the file itself is opened as u, so the kernel decides whether
	// u may create or replace it.
	if err := u.MakeDirs(filepath.Dir(path)); err != nil {
		return WrittenFile{}, fsStatus(err), fmt.Errorf("write %s: %w", path, err)
	}
	var f *os.File
	var existed bool
	err = u.Do(func() error {
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return fmt.Errorf("%s is a directory: %w", path, syscall.EISDIR)
		}
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			// Not truncated yet: that comes after the chown, as on E2B.
			existed = true
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
		}
		return err
	})
	if err != nil {
		return WrittenFile{}, fsStatus(err), fmt.Errorf("write %s: %w", path, err)
	}
	// From here on too, every file-system call on path runs as u: path may
	// have been redirected since it was opened (a directory of u's swapped
	// for a symlink), and envd must not remove or alter, on u's behalf,
	// anything u could not. Metadata goes through the open descriptor.
	// Only a regular file is truncated first and removed on failure: an
	// upload to a device or a FIFO (/dev/null, say) writes to it and
	// leaves it where it is.
	regular := true
	if fi, err := f.Stat(); err == nil {
		regular = fi.Mode().IsRegular()
	}
	remove := func() {
		if regular {
			u.Do(func() error { return os.Remove(path) })
		}
	}
	fail := func(status int, err error) (WrittenFile, int, error) {
		f.Close()
		remove()
		return WrittenFile{}, status, fmt.Errorf("write %s: %w", path, err)
	}
	// E2B's agent, as root, gives the file to u; here it is u's already
	// (or another's that u may write, which keeps its owner: u may not
	// change it, and the error is no failure), so this changes no owner,
	// but the kernel tells watchers of the attribute change all the same.
	u.Do(func() error { return f.Chown(int(u.UID), -1) })
	if existed && regular {
		if err := f.Truncate(0); err != nil {
			return fail(fsStatus(err), err)
		}
	}
	if _, err := io.Copy(f, src); err != nil {
		return fail(copyStatus(err), err)
	}
	if err := u.Do(func() error { return filesystem.SetMetadata(f, md) }); err != nil {
		return fail(fsStatus(err), err)
	}
	if err := f.Close(); err != nil {
		remove()
		return WrittenFile{}, copyStatus(err), fmt.Errorf("write %s: %w", path, err)
	}
	wf := WrittenFile{Path: path, Name: filepath.Base(path), Type: "file"}
	if len(md) > 0 {
		wf.Metadata = md
	}
	return wf, http.StatusOK, nil
}

// copyStatus tells a full disk from a client that stopped sending.
func copyStatus(err error) int {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return http.StatusInsufficientStorage
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fsStatus(err)
	}
	return http.StatusBadRequest
}

func fsStatus(err error) int {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return http.StatusForbidden
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENAMETOOLONG),
		errors.Is(err, syscall.EINVAL):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

func writeFSError(w http.ResponseWriter, path string, err error) {
	status := fsStatus(err)
	if status == http.StatusNotFound {
		writeError(w, status, "path '%s' does not exist", path)
		return
	}
	writeError(w, status, "%v", err)
}

// metadataHeaders collects X-Metadata-<key> headers; the first value of a
// repeated key wins, keys are lower-cased.
func metadataHeaders(h http.Header) (map[string]string, error) {
	md := map[string]string{}
	for name, vals := range h {
		key, ok := strings.CutPrefix(strings.ToLower(name), "x-metadata-")
		if !ok || len(vals) == 0 {
			continue
		}
		md[key] = vals[0]
	}
	if err := filesystem.ValidateMetadata(md); err != nil {
		return nil, err
	}
	return md, nil
}

// writeError answers with the JSON error shape the SDKs read.
func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Encoding")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(protocol.Error{Code: status, Message: fmt.Sprintf(format, args...)})
}
