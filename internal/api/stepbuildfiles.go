package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"cube/internal/api/wire"
	"cube/internal/httperr"
)

// UploadPath is the route of build file uploads. It is served without the
// API key: the SDK PUTs to the link GET /templates/{templateID}/files/{hash}
// answered, sending only the headers that answer names, so the link carries
// its own authority: ?expires=UNIX&signature=HEX[&verify=archive], an
// HMAC-SHA256 under Config.UploadSecret (uploadSignature). A link stores
// files once (uploadLinks): a copy of it that leaks later is spent.
const UploadPath = "/templates/{templateID}/files/{hash}/upload"

// templateFiles reads the template and files hash a build-file route
// names.
func templateFiles(r *http.Request) (tid, hash string, err error) {
	if tid, err = templateID(r); err != nil {
		return "", "", err
	}
	hash, err = filesHash(r)
	return tid, hash, err
}

// filesHash is the validated {hash} path value: the SDK's SHA-256 of a
// COPY step's files, in lowercase hex.
func filesHash(r *http.Request) (string, error) {
	h := r.PathValue("hash")
	if !validHash(h) {
		return "", badRequest("invalid files hash %q: want 64 lowercase hex digits (SHA-256)", h)
	}
	return h, nil
}

func validHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// fileUploadLink serves GET /templates/{templateID}/files/{hash}.
func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request) error {
	tid, hash, err := templateFiles(r)
	if err != nil {
		return err
	}
	verify, err := uploadVerify(r)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	present, err := b.FilesPresent(r.Context(), callerOf(r).Team, tid, hash)
	if err != nil {
		return err
	}
	if present {
		writeJSON(w, http.StatusCreated, wire.TemplateBuildFileUpload{Present: true})
		return nil
	}
	link := s.uploadURL(r, tid, hash, time.Now().Add(UploadLinkTTL), verify)
	writeJSON(w, http.StatusCreated, wire.TemplateBuildFileUpload{URL: link})
	return nil
}

// uploadVerify reads ?verify=, "" or wire.VerifyArchive.
func uploadVerify(r *http.Request) (string, error) {
	v := r.URL.Query().Get("verify")
	if v != "" && v != wire.VerifyArchive {
		return "", badRequest("verify must be %q ({hash} is the SHA-256 of the tar archive) or absent, got %q", wire.VerifyArchive, v)
	}
	return v, nil
}

// uploadURL is the absolute upload link of a COPY step's files on the
// server r reached, valid until expires.
func (s *Server) uploadURL(r *http.Request, templateID, hash string, expires time.Time, verify string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	unix := expires.Unix()
	q := url.Values{
		"expires":   {strconv.FormatInt(unix, 10)},
		"signature": {s.uploadSignature(templateID, hash, unix, verify)},
	}
	if verify != "" {
		q.Set("verify", verify)
	}
	path := strings.NewReplacer("{templateID}", url.PathEscape(templateID), "{hash}", hash).Replace(UploadPath)
	return scheme + "://" + r.Host + path + "?" + q.Encode()
}

// uploadSignature is the hex HMAC-SHA256 that authorizes uploading the
// files named hash of template templateID until the Unix time expires,
// checked as verify says.
func (s *Server) uploadSignature(templateID, hash string, expires int64, verify string) string {
	mac := hmac.New(sha256.New, s.cfg.UploadSecret)
	fmt.Fprintf(mac, "%s\n%s\n%d\n%s", templateID, hash, expires, verify)
	return hex.EncodeToString(mac.Sum(nil))
}

// signedLink is a signed upload link as a request presents it.
type signedLink struct {
	// key names the link whatever its spelling (the signature's bytes;
	// hex digits may come in either case).
	key     string
	expires int64
	verify  bool
}

// checkUploadSignature answers 403 unless the request carries a valid,
// unexpired signature for templateID and hash.
func (s *Server) checkUploadSignature(r *http.Request, templateID, hash string) (signedLink, error) {
	q := r.URL.Query()
	expires, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	got, hexErr := hex.DecodeString(q.Get("signature"))
	verify := q.Get("verify")
	want, _ := hex.DecodeString(s.uploadSignature(templateID, hash, expires, verify))
	if err != nil || hexErr != nil || !hmac.Equal(got, want) {
		return signedLink{}, httperr.Errorf(http.StatusForbidden, "invalid upload signature: ask GET /templates/{templateID}/files/{hash} for a link")
	}
	if time.Now().Unix() > expires {
		return signedLink{}, httperr.Errorf(http.StatusForbidden, "upload link expired at %s: ask GET /templates/{templateID}/files/{hash} for a new one", time.Unix(expires, 0).UTC().Format(time.RFC3339))
	}
	return signedLink{key: string(got), expires: expires, verify: verify == wire.VerifyArchive}, nil
}

// uploadLinks remembers the links that are storing files or have stored
// them, until they expire: a link stores files once, so one copied from a
// log or a proxy after its upload is spent, and two uploads through one
// link never race. An upload that fails frees its link for a retry.
// Links die with the process, as the upload secret does by default.
type uploadLinks struct {
	mu    sync.Mutex
	links map[string]linkState
}

type linkState struct {
	expires int64
	spent   bool // false: an upload through it is under way
}

// claim takes link for one upload, or says why it cannot be used.
func (l *uploadLinks) claim(link signedLink) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now().Unix()
	for k, st := range l.links {
		if st.expires < now {
			delete(l.links, k)
		}
	}
	if st, ok := l.links[link.key]; ok {
		if st.spent {
			return httperr.Errorf(http.StatusForbidden, "upload link already used: a link stores files once; ask GET /templates/{templateID}/files/{hash} for a new one")
		}
		return httperr.Errorf(http.StatusConflict, "another upload through this link is under way")
	}
	if l.links == nil {
		l.links = map[string]linkState{}
	}
	l.links[link.key] = linkState{expires: link.expires}
	return nil
}

// release ends the upload claim started: a stored one spends the link.
func (l *uploadLinks) release(link signedLink, stored bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if stored {
		l.links[link.key] = linkState{expires: link.expires, spent: true}
	} else {
		delete(l.links, link.key)
	}
}

// uploadFiles serves PUT UploadPath: a COPY step's tar archive, streamed
// to the builder as it arrives. Its body limit is the builder's (see
// bodyLimit). It has no caller, and so no team: the link's signature,
// made by fileUploadLink once FilesPresent checked the caller's team, is
// its authority over the one template ID it names.
func (s *Server) uploadFiles(w http.ResponseWriter, r *http.Request) error {
	tid, hash, err := templateFiles(r)
	if err != nil {
		return err
	}
	link, err := s.checkUploadSignature(r, tid, hash)
	if err != nil {
		return err
	}
	b, err := s.stepBuilder()
	if err != nil {
		return err
	}
	tooLarge := fmt.Sprintf("the files are larger than the server accepts (%d bytes)", b.MaxFilesBytes())
	if r.ContentLength > b.MaxFilesBytes() {
		return httperr.Errorf(http.StatusRequestEntityTooLarge, "%s: the upload has %d", tooLarge, r.ContentLength)
	}
	if err := s.uploads.claim(link); err != nil {
		return err
	}
	err = b.PutFiles(r.Context(), tid, hash, tooLargeAsKind{r.Body, tooLarge}, link.verify)
	s.uploads.release(link, err == nil)
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
