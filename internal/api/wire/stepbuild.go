package wire

import "time"

// The shapes of E2B's SDK template builder (Template.build in the SDKs):
// request a build, upload the files of COPY steps, start it, follow it.

// TemplateBuildRequestV3 is the body of POST /v3/templates.
type TemplateBuildRequestV3 struct {
	// Name is the template's name, optionally with ":tag".
	Name string `json:"name,omitempty"`
	// Alias is the deprecated spelling of Name.
	Alias    string   `json:"alias,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	CPUCount int      `json:"cpuCount,omitempty"`
	MemoryMB int      `json:"memoryMB,omitempty"`
	// MinFreeDiskMb is accepted and ignored: a build's disk is the node's.
	MinFreeDiskMb int `json:"minFreeDiskMb,omitempty"`
}

// TemplateRequestResponseV3 is the answer to POST /v3/templates.
type TemplateRequestResponseV3 struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Names      []string `json:"names"`
	// Aliases repeats Names for older SDKs.
	Aliases []string `json:"aliases"`
	Tags    []string `json:"tags"`
	Public  bool     `json:"public"`
}

// VerifyArchive, as ?verify= of GET /templates/{templateID}/files/{hash},
// says that {hash} is the SHA-256 of the tar archive (before any gzip):
// the link it answers then stores only an archive with that hash.
// cubemastercli names files so; the SDKs' hash is of the source tree's
// paths, stat data and contents with the step's arguments, which the
// server cannot recompute from an upload, so their links go without.
const VerifyArchive = "archive"

// TemplateBuildFileUpload is the answer to GET
// /templates/{templateID}/files/{hash}: either the files are present, or
// URL is where to PUT their tar archive.
type TemplateBuildFileUpload struct {
	Present bool   `json:"present"`
	URL     string `json:"url,omitempty"`
	// Headers must be sent with the upload.
	Headers map[string]string `json:"headers,omitempty"`
}

// TemplateBuildStartV2 is the body of POST
// /v2/templates/{templateID}/builds/{buildID}, what the SDK's
// Template.toJSON() prints. Exactly one of FromImage and FromTemplate is
// set.
type TemplateBuildStartV2 struct {
	FromImage         string             `json:"fromImage,omitempty"`
	FromTemplate      string             `json:"fromTemplate,omitempty"`
	FromImageRegistry *FromImageRegistry `json:"fromImageRegistry,omitempty"`
	Steps             []TemplateStep     `json:"steps,omitempty"`
	StartCmd          string             `json:"startCmd,omitempty"`
	ReadyCmd          string             `json:"readyCmd,omitempty"`
	Force             bool               `json:"force,omitempty"`
}

// FromImageRegistry is the credentials of fromImage's registry. E2B's
// schema is a union by Type: "registry" (Username, Password), "aws" and
// "gcp"; only "registry" is served here.
type FromImageRegistry struct {
	Type               string `json:"type"`
	Username           string `json:"username,omitempty"`
	Password           string `json:"password,omitempty"`
	AWSAccessKeyID     string `json:"awsAccessKeyId,omitempty"`
	AWSSecretAccessKey string `json:"awsSecretAccessKey,omitempty"`
	AWSRegion          string `json:"awsRegion,omitempty"`
	ServiceAccountJSON string `json:"serviceAccountJson,omitempty"`
}

// TemplateStep is one step of a build: RUN, COPY, ENV, WORKDIR or USER.
type TemplateStep struct {
	Type string   `json:"type"`
	Args []string `json:"args,omitempty"`
	// FilesHash names a COPY step's uploaded files.
	FilesHash string `json:"filesHash,omitempty"`
	Force     bool   `json:"force,omitempty"`
}

// BuildStatusInfo is the answer to GET
// /templates/{templateID}/builds/{buildID}/status (E2B's
// TemplateBuildInfo, a name Cube's template answers already use).
type BuildStatusInfo struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
	// Status is waiting, building, ready or error.
	Status     string          `json:"status"`
	LogEntries []BuildLogEntry `json:"logEntries"`
	// Logs is always empty: E2B's plain-text logs are gone from its API
	// too, but the SDKs read the field.
	Logs   []string           `json:"logs"`
	Reason *BuildStatusReason `json:"reason,omitempty"`
	// QueuePosition, a Cube addition, is set while the build waits: the
	// builds that start before it.
	QueuePosition *int `json:"queuePosition,omitempty"`
}

// BuildLogEntry is one line of a build's log.
type BuildLogEntry struct {
	// Timestamp is RFC 3339 with milliseconds.
	Timestamp string `json:"timestamp"`
	Level     string `json:"level"`
	Message   string `json:"message"`
	// Step is "base", a step's number (1-based) or "finalize".
	Step string `json:"step,omitempty"`
}

// BuildStatusReason says why a build failed.
type BuildStatusReason struct {
	Message    string          `json:"message"`
	Step       string          `json:"step,omitempty"`
	LogEntries []BuildLogEntry `json:"logEntries"`
}

// TemplateBuildLogsResponse is the answer to GET
// /templates/{templateID}/builds/{buildID}/logs.
type TemplateBuildLogsResponse struct {
	Logs []BuildLogEntry `json:"logs"`
}

// AssignTemplateTagsRequest is the body of POST /templates/tags.
type AssignTemplateTagsRequest struct {
	// Target is "name" or "name:tag": the build the tags will name.
	Target string   `json:"target"`
	Tags   []string `json:"tags"`
}

// AssignedTemplateTags is the answer to POST /templates/tags.
type AssignedTemplateTags struct {
	BuildID string   `json:"buildID"`
	Tags    []string `json:"tags"`
}

// DeleteTemplateTagsRequest is the body of DELETE /templates/tags.
type DeleteTemplateTagsRequest struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// TemplateTag is one element of GET /templates/{templateID}/tags.
type TemplateTag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// TemplateUpdateRequest is the body of PATCH /templates/{templateID}.
type TemplateUpdateRequest struct {
	Public *bool `json:"public,omitempty"`
}

// TemplateUpdateResponse is the answer to PATCH /templates/{templateID}.
type TemplateUpdateResponse struct {
	Names []string `json:"names"`
}
