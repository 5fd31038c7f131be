package api

import (
	"net/http"

	spec "cube/api"
	"cube/internal/httperr"
)

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(spec.OpenAPI)
	return nil
}

// caCert answers GET /tls/ca.pem with the local CA's certificate.
func (s *Server) caCert(w http.ResponseWriter, r *http.Request) error {
	if len(s.cfg.CACert) == 0 {
		return httperr.Errorf(http.StatusNotFound, "this server's certificates do not come from Cube's local CA (it was started with --tls-cert or --acme, or without --tls-listen)")
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, _ = w.Write(s.cfg.CACert)
	return nil
}
