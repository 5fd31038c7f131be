package client

import (
	"context"
	"net/http"
	"net/url"

	"cube/internal/api/wire"
)

// ListNodes is GET /nodes.
func (c *Client) ListNodes(ctx context.Context) ([]wire.Node, error) {
	var out []wire.Node
	_, err := c.Do(ctx, http.MethodGet, "/nodes", nil, nil, &out)
	return out, err
}

// GetNode is GET /nodes/{nodeID}.
func (c *Client) GetNode(ctx context.Context, id string) (*wire.Node, error) {
	var out wire.Node
	if _, err := c.Do(ctx, http.MethodGet, "/nodes/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetNodeStatus is POST /nodes/{nodeID}: ready, draining or standby.
func (c *Client) SetNodeStatus(ctx context.Context, id, status string) error {
	_, err := c.Do(ctx, http.MethodPost, "/nodes/"+url.PathEscape(id), nil, wire.NodeStatusChange{Status: status}, nil)
	return err
}

// RemoveNode is DELETE /nodes/{nodeID}.
func (c *Client) RemoveNode(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/nodes/"+url.PathEscape(id), nil, nil, nil)
	return err
}
