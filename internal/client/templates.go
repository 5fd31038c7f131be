package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"cube/internal/api/wire"
)

// Build job phases that end a build.
const (
	PhaseReady  = "READY"
	PhaseFailed = "FAILED"
)

// CreateTemplate starts a template build from an image.
func (c *Client) CreateTemplate(ctx context.Context, req wire.TemplateBuildRequest) (*wire.TemplateBuildStarted, error) {
	var out wire.TemplateBuildStarted
	if _, err := c.Do(ctx, http.MethodPost, "/templates", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TemplateJob returns a build job's status.
func (c *Client) TemplateJob(ctx context.Context, jobID string) (*wire.TemplateBuildJob, error) {
	var out wire.TemplateBuildJob
	if _, err := c.Do(ctx, http.MethodGet, "/templates/jobs/"+url.PathEscape(jobID), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WatchTemplateJob polls a build job every interval, calling fn with each
// answer, until it is READY or FAILED or ctx ends; it returns the last
// answer. A FAILED job is not an error here: the caller reads its reason.
func (c *Client) WatchTemplateJob(ctx context.Context, jobID string, interval time.Duration, fn func(*wire.TemplateBuildJob)) (*wire.TemplateBuildJob, error) {
	for {
		j, err := c.TemplateJob(ctx, jobID)
		if err != nil {
			return nil, err
		}
		if fn != nil {
			fn(j)
		}
		if j.Phase == PhaseReady || j.Phase == PhaseFailed {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// ListTemplates returns every template with its build facts.
func (c *Client) ListTemplates(ctx context.Context) ([]wire.TemplateListed, error) {
	var out []wire.TemplateListed
	if _, err := c.Do(ctx, http.MethodGet, "/templates", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// GetTemplate returns one template (by id or alias) with its build facts.
func (c *Client) GetTemplate(ctx context.Context, idOrAlias string) (*wire.TemplateDetail, error) {
	var out wire.TemplateDetail
	if _, err := c.Do(ctx, http.MethodGet, "/templates/"+url.PathEscape(idOrAlias), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteTemplate deletes a template (by id or alias) and its snapshot.
func (c *Client) DeleteTemplate(ctx context.Context, idOrAlias string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/templates/"+url.PathEscape(idOrAlias), nil, nil, nil)
	return err
}
