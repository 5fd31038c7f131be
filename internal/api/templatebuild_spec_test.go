package api

import "cube/internal/api/wire"

// The template build schemas join the spec check's list of wire types.
func init() {
	schemaTypes["TemplateBuildRequest"] = wire.TemplateBuildRequest{}
	schemaTypes["TemplateBuildStarted"] = wire.TemplateBuildStarted{}
	schemaTypes["TemplateBuildJob"] = wire.TemplateBuildJob{}
	schemaTypes["TemplateBuildInfo"] = wire.TemplateBuildInfo{}
}
