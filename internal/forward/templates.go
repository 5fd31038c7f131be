package forward

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"cube/internal/cube"
	"cube/internal/httperr"
)

// templateCall is the internal route of the typed calls on a template (by
// ID or alias) that a peer holds, as sandboxCall is for sandboxes. A
// template's build files (their upload links, signed by the node that
// holds them, and the uploads) are passed to its node as the requests they
// came in (Handler).
const templateCall = InternalPrefix + "templates/{id}/calls/{op}"

// The calls on a template, by the {op} of templateCall.
const (
	opGetTemplate    = "get"
	opDeleteTemplate = "delete"
	opStartBuild     = "start-build"
	opBuildStatus    = "build-status"
	opBuildLogs      = "build-logs"
	opTemplateTags   = "tags"
	opSetPublic      = "public"
)

// templateArgs are the arguments of a call on a template: its team's, and
// what the call takes of the rest.
type templateArgs struct {
	Team       string             `json:"team"`
	BuildID    string             `json:"buildID,omitempty"`
	Spec       *cube.BuildSpec    `json:"spec,omitempty"`
	LogsOffset int                `json:"logsOffset,omitempty"`
	Query      cube.BuildLogQuery `json:"query"`
	Public     bool               `json:"public,omitempty"`
}

// callTemplate makes the typed call op on template id of node.
func (c *Client) callTemplate(ctx context.Context, node, id, op string, args templateArgs, out any) error {
	body, err := json.Marshal(args)
	if err != nil {
		return err
	}
	path := strings.Replace(strings.Replace(templateCall, "{id}", url.PathEscape(id), 1), "{op}", op, 1)
	return c.exchange(ctx, node, path, body, out)
}

// GetTemplate reads template idOrAlias as team sees it, on node.
func (c *Client) GetTemplate(ctx context.Context, node, team, idOrAlias string) (*cube.Template, error) {
	var t cube.Template
	if err := c.callTemplate(ctx, node, idOrAlias, opGetTemplate, templateArgs{Team: team}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTemplate deletes team's template idOrAlias, and its files, on node.
func (c *Client) DeleteTemplate(ctx context.Context, node, team, idOrAlias string) error {
	return c.callTemplate(ctx, node, idOrAlias, opDeleteTemplate, templateArgs{Team: team}, &none{})
}

// StartBuild starts build buildID of template templateID on node, which
// requested it and holds its files.
func (c *Client) StartBuild(ctx context.Context, node, team, templateID, buildID string, spec cube.BuildSpec) error {
	return c.callTemplate(ctx, node, templateID, opStartBuild, templateArgs{Team: team, BuildID: buildID, Spec: &spec}, &none{})
}

// BuildStatus reads a build's status on the node that runs it.
func (c *Client) BuildStatus(ctx context.Context, node, team, templateID, buildID string, logsOffset int) (*cube.BuildStatus, error) {
	var st cube.BuildStatus
	if err := c.callTemplate(ctx, node, templateID, opBuildStatus, templateArgs{Team: team, BuildID: buildID, LogsOffset: logsOffset}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// BuildLogs reads a build's logs on the node that runs it.
func (c *Client) BuildLogs(ctx context.Context, node, team, templateID, buildID string, q cube.BuildLogQuery) ([]cube.BuildLogEntry, error) {
	var out []cube.BuildLogEntry
	err := c.callTemplate(ctx, node, templateID, opBuildLogs, templateArgs{Team: team, BuildID: buildID, Query: q}, &out)
	return out, err
}

// TemplateTags reads a template's tags on node.
func (c *Client) TemplateTags(ctx context.Context, node, team, idOrName string) ([]cube.TemplateTag, error) {
	var out []cube.TemplateTag
	err := c.callTemplate(ctx, node, idOrName, opTemplateTags, templateArgs{Team: team}, &out)
	return out, err
}

// SetPublic makes a template public or private on node, answering its
// names.
func (c *Client) SetPublic(ctx context.Context, node, team, idOrName string, public bool) ([]string, error) {
	var out []string
	err := c.callTemplate(ctx, node, idOrName, opSetPublic, templateArgs{Team: team, Public: public}, &out)
	return out, err
}

// serveTemplates answers, on mux, the typed calls peers make on the
// templates this node holds, through local.
func serveTemplates(mux *http.ServeMux, local Local, maxBody int64) {
	mux.HandleFunc("POST "+templateCall, func(w http.ResponseWriter, r *http.Request) {
		var a templateArgs
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&a); err != nil {
			httperr.Write(w, cube.Errorf(cube.Invalid, "a peer's call: %v", err))
			return
		}
		ctx, id := r.Context(), r.PathValue("id")
		var out any
		var err error
		switch r.PathValue("op") {
		case opGetTemplate:
			out, err = local.GetTemplate(ctx, a.Team, id)
		case opDeleteTemplate:
			out, err = none{}, local.DeleteTemplate(ctx, a.Team, id)
		case opStartBuild:
			if a.Spec == nil {
				err = cube.Errorf(cube.Invalid, "a peer's start of build %q names no spec", a.BuildID)
				break
			}
			out, err = none{}, local.StartBuild(ctx, a.Team, id, a.BuildID, *a.Spec)
		case opBuildStatus:
			out, err = local.BuildStatus(ctx, a.Team, id, a.BuildID, a.LogsOffset)
		case opBuildLogs:
			out, err = local.BuildLogs(ctx, a.Team, id, a.BuildID, a.Query)
		case opTemplateTags:
			out, err = local.TemplateTags(ctx, a.Team, id)
		case opSetPublic:
			out, err = local.SetPublic(ctx, a.Team, id, a.Public)
		default:
			// A call of a later version: the caller takes this node for
			// an older one, as it is.
			http.NotFound(w, r)
			return
		}
		answer(w, http.StatusOK, out, err)
	})
}
