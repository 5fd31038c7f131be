package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"cube/internal/api/wire"
)

// CreateVolume creates a persistent volume; sizeMB 0 takes the server's
// default size.
func (c *Client) CreateVolume(ctx context.Context, name string, sizeMB int64) (*wire.VolumeAndToken, error) {
	body := wire.NewVolume{Name: name}
	if sizeMB > 0 {
		body.SizeMB = &sizeMB
	}
	var out wire.VolumeAndToken
	if _, err := c.Do(ctx, http.MethodPost, "/volumes", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListVolumes returns every volume, by name.
func (c *Client) ListVolumes(ctx context.Context) ([]wire.Volume, error) {
	var out []wire.Volume
	_, err := c.Do(ctx, http.MethodGet, "/volumes", nil, nil, &out)
	return out, err
}

// GetVolume returns one volume, with its content token and usage.
func (c *Client) GetVolume(ctx context.Context, volumeID string) (*wire.VolumeAndToken, error) {
	var out wire.VolumeAndToken
	if _, err := c.Do(ctx, http.MethodGet, "/volumes/"+url.PathEscape(volumeID), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteVolume deletes a volume and its content.
func (c *Client) DeleteVolume(ctx context.Context, volumeID string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/volumes/"+url.PathEscape(volumeID), nil, nil, nil)
	return err
}

// ResolveVolume returns the ID of the volume called nameOrID, or
// nameOrID itself when it is an ID.
func (c *Client) ResolveVolume(ctx context.Context, nameOrID string) (string, error) {
	if strings.HasPrefix(nameOrID, "vol-") {
		return nameOrID, nil
	}
	vs, err := c.ListVolumes(ctx)
	if err != nil {
		return "", err
	}
	for _, v := range vs {
		if v.Name == nameOrID {
			return v.VolumeID, nil
		}
	}
	return "", &APIError{Method: http.MethodGet, Path: "/volumes", Status: http.StatusNotFound, Message: fmt.Sprintf("no volume is called %q", nameOrID)}
}

// ListVolumeDir lists a directory of a volume down to depth levels.
func (c *Client) ListVolumeDir(ctx context.Context, volumeID, path string, depth int) ([]wire.VolumeEntryStat, error) {
	q := url.Values{"path": {path}, "depth": {strconv.Itoa(depth)}}
	var out []wire.VolumeEntryStat
	_, err := c.Do(ctx, http.MethodGet, contentPath(volumeID, "dir"), q, nil, &out)
	return out, err
}

// ReadVolumeFile copies a file of a volume to w.
func (c *Client) ReadVolumeFile(ctx context.Context, volumeID, path string, w io.Writer) error {
	res, err := c.content(ctx, http.MethodGet, volumeID, url.Values{"path": {path}}, nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, err = io.Copy(w, res.Body)
	return err
}

// WriteVolumeFile writes r to a file of a volume; force replaces a file
// that exists and makes missing directories.
func (c *Client) WriteVolumeFile(ctx context.Context, volumeID, path string, r io.Reader, force bool) (*wire.VolumeEntryStat, error) {
	res, err := c.content(ctx, http.MethodPut, volumeID, url.Values{"path": {path}, "force": {strconv.FormatBool(force)}}, r)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out wire.VolumeEntryStat
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("PUT %s: decoding answer: %w", contentPath(volumeID, "file"), err)
	}
	return &out, nil
}

func contentPath(volumeID, what string) string {
	return "/volumecontent/" + url.PathEscape(volumeID) + "/" + what
}

// content sends a raw file request to a volume's content routes, which
// take the API key as well as the volume's own token.
func (c *Client) content(ctx context.Context, method, volumeID string, q url.Values, body io.Reader) (*http.Response, error) {
	path := contentPath(volumeID, "file")
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path+"?"+q.Encode(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", c.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		defer res.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		return nil, answerError(method, path, res.StatusCode, data)
	}
	return res, nil
}
