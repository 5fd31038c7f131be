package envd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"cube/internal/envd/protocol"
	"cube/internal/envd/state"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(protocol.HeaderVersion, protocol.Version)
	w.WriteHeader(http.StatusNoContent)
}

// init is how the control plane configures a sandbox it hands out: env vars,
// access token, default user and working directory. It is open until a
// token is set; after that only the current token may call it, which is how
// a sandbox restored from another's snapshot receives its own token.
// A timestamped /init must be newer than the last one applied and not
// ahead of the sandbox clock by more than state.MaxInitClockSkew: stale
// requests get 409, future ones 400, so neither a late retry nor a
// far-future stamp sent from inside the sandbox can pin its token.
//
// Clones of one snapshot share all user-space state, so nothing envd hands
// out may come from a generator seeded before the snapshot: ids and tokens
// are read from the kernel (crypto/rand) at the moment they are made, and
// there is nothing left for /init to reseed.
func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(protocol.HeaderVersion, protocol.Version)
	if !s.State.Authorized(r.Header.Get(protocol.HeaderAccessToken)) { // requireToken checked too; re-keying merits both
		writeError(w, http.StatusUnauthorized, "%v", errNoToken)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read body: %v", err)
		return
	}
	if len(body) > 1<<20 {
		writeError(w, http.StatusRequestEntityTooLarge, "init body larger than 1 MiB")
		return
	}
	var in protocol.Init
	if len(bytes.TrimSpace(body)) > 0 {
		// Unmarshal, unlike a Decoder, also refuses data after the object.
		if err := json.Unmarshal(body, &in); err != nil {
			writeError(w, http.StatusBadRequest, "init body is not one JSON object: %v", err)
			return
		}
	}
	if err := s.State.Apply(in, time.Now()); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, state.ErrInitStale) {
			status = http.StatusConflict
		}
		writeError(w, status, "%v", err)
		return
	}
	s.log.Info("initialised", "envVars", len(in.EnvVars),
		"token", in.AccessToken != nil && *in.AccessToken != "", "defaultUser", in.DefaultUser)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) envs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.State.Env())
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	m, err := s.metrics.sample()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(m)
}

// writeError answers with the JSON error shape the SDKs read.
func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(protocol.Error{Code: status, Message: fmt.Sprintf(format, args...)})
}
