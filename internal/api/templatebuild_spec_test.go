package api

import "cube/internal/api/wire"

// The template build schemas join the spec check's list of wire types.
func init() {
	schemaTypes["TemplateBuildRequest"] = wire.TemplateBuildRequest{}
	schemaTypes["TemplateBuildStarted"] = wire.TemplateBuildStarted{}
	schemaTypes["TemplateBuildJob"] = wire.TemplateBuildJob{}
	schemaTypes["TemplateBuildInfo"] = wire.TemplateBuildInfo{}
}

// The step build schemas likewise.
func init() {
	for name, v := range map[string]any{
		"TemplateBuildRequestV3": wire.TemplateBuildRequestV3{}, "TemplateRequestResponseV3": wire.TemplateRequestResponseV3{},
		"TemplateBuildFileUpload": wire.TemplateBuildFileUpload{}, "TemplateBuildStartV2": wire.TemplateBuildStartV2{},
		"FromImageRegistry": wire.FromImageRegistry{}, "TemplateStep": wire.TemplateStep{},
		"BuildStatusInfo": wire.BuildStatusInfo{}, "BuildLogEntry": wire.BuildLogEntry{},
		"BuildStatusReason": wire.BuildStatusReason{}, "TemplateBuildLogsResponse": wire.TemplateBuildLogsResponse{},
		"AssignTemplateTagsRequest": wire.AssignTemplateTagsRequest{}, "AssignedTemplateTags": wire.AssignedTemplateTags{},
		"DeleteTemplateTagsRequest": wire.DeleteTemplateTagsRequest{}, "TemplateTag": wire.TemplateTag{},
		"TemplateUpdateRequest": wire.TemplateUpdateRequest{}, "TemplateUpdateResponse": wire.TemplateUpdateResponse{},
	} {
		schemaTypes[name] = v
	}
}
