package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"cube/internal/api/wire"
)

// Build statuses that end a step build.
const (
	BuildReady = "ready"
	BuildError = "error"
)

// RequestBuild reserves a step build of the template req names
// (POST /v3/templates).
func (c *Client) RequestBuild(ctx context.Context, req wire.TemplateBuildRequestV3) (*wire.TemplateRequestResponseV3, error) {
	var out wire.TemplateRequestResponseV3
	if _, err := c.Do(ctx, http.MethodPost, "/v3/templates", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FileUploadLink asks whether the files named hash are stored, and where
// to upload them if not. With verify, hash is the SHA-256 of the tar
// archive, and the link stores only an archive with that hash.
func (c *Client) FileUploadLink(ctx context.Context, templateID, hash string, verify bool) (*wire.TemplateBuildFileUpload, error) {
	var out wire.TemplateBuildFileUpload
	path := "/templates/" + url.PathEscape(templateID) + "/files/" + url.PathEscape(hash)
	if verify {
		path += "?verify=" + wire.VerifyArchive
	}
	if _, err := c.Do(ctx, http.MethodGet, path, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UploadFiles stores a COPY step's tar archive under its hash, as the SDK
// does: ask for a link, and PUT the archive to it unless the server has
// it already. A hash that is the archive's SHA-256 is asked to be checked,
// so the link is no use for any other archive. It reports whether it
// uploaded.
func (c *Client) UploadFiles(ctx context.Context, templateID, hash string, archive []byte) (uploaded bool, err error) {
	sum := sha256.Sum256(archive)
	link, err := c.FileUploadLink(ctx, templateID, hash, hex.EncodeToString(sum[:]) == hash)
	if err != nil {
		return false, err
	}
	if link.Present || link.URL == "" {
		return false, nil
	}
	return true, c.put(ctx, link, archive)
}

// put sends archive to an upload link with only the link's headers: the
// link carries its own authority, and the API key stays off it.
func (c *Client) put(ctx context.Context, link *wire.TemplateBuildFileUpload, archive []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, link.URL, bytes.NewReader(archive))
	if err != nil {
		return err
	}
	for k, v := range link.Headers {
		req.Header.Set(k, v)
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("uploading files: %w", err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return answerError(http.MethodPut, req.URL.Path, res.StatusCode, data)
	}
	return nil
}

// StartBuild starts a requested build.
func (c *Client) StartBuild(ctx context.Context, templateID, buildID string, spec wire.TemplateBuildStartV2) error {
	_, err := c.Do(ctx, http.MethodPost, "/v2/templates/"+url.PathEscape(templateID)+"/builds/"+url.PathEscape(buildID), nil, spec, nil)
	return err
}

// BuildStatus returns a build's status and its log entries after the
// first logsOffset.
func (c *Client) BuildStatus(ctx context.Context, templateID, buildID string, logsOffset int) (*wire.BuildStatusInfo, error) {
	var out wire.BuildStatusInfo
	q := url.Values{"logsOffset": {strconv.Itoa(logsOffset)}}
	if _, err := c.Do(ctx, http.MethodGet, buildPath(templateID, buildID)+"/status", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BuildLogOptions select the entries BuildLogs returns; zero values are
// the server's defaults.
type BuildLogOptions struct {
	// Cursor is Unix milliseconds.
	Cursor   int64
	Limit    int
	Backward bool
	Level    string
}

// BuildLogs returns a build's log entries.
func (c *Client) BuildLogs(ctx context.Context, templateID, buildID string, o BuildLogOptions) ([]wire.BuildLogEntry, error) {
	q := url.Values{}
	if o.Cursor > 0 {
		q.Set("cursor", strconv.FormatInt(o.Cursor, 10))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Backward {
		q.Set("direction", "backward")
	}
	if o.Level != "" {
		q.Set("level", o.Level)
	}
	var out wire.TemplateBuildLogsResponse
	if _, err := c.Do(ctx, http.MethodGet, buildPath(templateID, buildID)+"/logs", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Logs, nil
}

func buildPath(templateID, buildID string) string {
	return "/templates/" + url.PathEscape(templateID) + "/builds/" + url.PathEscape(buildID)
}
