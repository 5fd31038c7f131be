package api

import (
	"net/http"

	spec "cube/api"
	"cube/internal/httperr"
)

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(spec.OpenAPI)
}

// caCert answers GET /tls/ca.pem with the local CA's certificate.
func (s *Server) caCert(w http.ResponseWriter, r *http.Request) {
	if len(s.cfg.CACert) == 0 {
		writeError(w, httperr.Errorf(http.StatusNotFound, "this server's certificates do not come from Cube's local CA (it was started with --tls-cert or --acme, or without --tls-listen)"))
		return
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, _ = w.Write(s.cfg.CACert)
}
