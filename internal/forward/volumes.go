package forward

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"cube/internal/cube"
	"cube/internal/httperr"
)

// volumeCall is the internal route of the typed calls on a volume's
// record that a peer holds, as sandboxCall is for sandboxes. A volume's
// content (its files, streamed) is passed to its node as the request it
// came in (Handler).
const volumeCall = InternalPrefix + "volumes/{id}/calls/{op}"

// The calls on a volume, by the {op} of volumeCall.
const (
	opGetVolume    = "get"
	opDeleteVolume = "delete"
)

// callVolume makes the typed call op on volume id of node.
func (c *Client) callVolume(ctx context.Context, node, id, op string, out any) error {
	path := strings.Replace(strings.Replace(volumeCall, "{id}", url.PathEscape(id), 1), "{op}", op, 1)
	return c.exchange(ctx, node, path, []byte("{}"), out)
}

// GetVolume reads volume id as node, which holds its files, sees it.
func (c *Client) GetVolume(ctx context.Context, node, id string) (*cube.Volume, error) {
	var v cube.Volume
	if err := c.callVolume(ctx, node, id, opGetVolume, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// DeleteVolume deletes volume id, and its files, on node.
func (c *Client) DeleteVolume(ctx context.Context, node, id string) error {
	return c.callVolume(ctx, node, id, opDeleteVolume, &none{})
}

// serveVolumes answers, on mux, the typed calls peers make on the volumes
// this node holds, through local.
func serveVolumes(mux *http.ServeMux, local Local, maxBody int64) {
	mux.HandleFunc("POST "+volumeCall, func(w http.ResponseWriter, r *http.Request) {
		var out any
		var err error
		if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxBody)); err != nil {
			httperr.Write(w, cube.Errorf(cube.Invalid, "a peer's call: %v", err))
			return
		}
		switch id := r.PathValue("id"); r.PathValue("op") {
		case opGetVolume:
			out, err = local.GetVolume(r.Context(), id)
		case opDeleteVolume:
			out, err = none{}, local.DeleteVolume(r.Context(), id)
		default:
			// A call of a later version: the caller takes this node for
			// an older one, as it is.
			http.NotFound(w, r)
			return
		}
		answer(w, http.StatusOK, out, err)
	})
}
