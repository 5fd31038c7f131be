package api

import (
	"net/http"

	"cube/internal/httperr"
)

// console hands the web console's routes to Config.Console; which of
// them need the key is the route table's business, as for every route.
func (s *Server) console(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Console == nil {
		return httperr.Errorf(http.StatusNotFound, "this server has no web console")
	}
	s.cfg.Console.ServeHTTP(w, r)
	return nil
}
