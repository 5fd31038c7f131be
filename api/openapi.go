// Package api holds Cube's HTTP contract, api/openapi.yml, embedded so the
// server can serve exactly the file that is reviewed and tested.
package api

import _ "embed"

// OpenAPI is the text of openapi.yml.
//
//go:embed openapi.yml
var OpenAPI []byte
