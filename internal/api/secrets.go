package api

import (
	"net/http"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// The /secrets routes: values go in, metadata comes out, never a value.
// Each acts for the caller's team, whose secrets are the only ones it
// sees: another team's is answered as one that does not exist.

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	sc, err := capability[cube.Secrets](s, "secrets are")
	if err != nil {
		return err
	}
	items, err := sc.ListSecrets(r.Context(), callerOf(r).Team)
	if err != nil {
		return err
	}
	items, next, err := page(items, func(i *cube.SecretInfo) (time.Time, string) { return i.CreatedAt, i.ID }, true, limit, token)
	if err != nil {
		return err
	}
	out := make([]wire.Secret, 0, len(items))
	for _, i := range items {
		out = append(out, wireSecret(i))
	}
	setNextToken(w, next)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createSecret(w http.ResponseWriter, r *http.Request) error {
	var body wire.NewSecret
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	sc, err := capability[cube.Secrets](s, "secrets are")
	if err != nil {
		return err
	}
	info, err := sc.CreateSecret(r.Context(), callerOf(r).Team, body.Name, body.Value, body.Metadata)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wireSecret(info))
	return nil
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) error {
	sc, err := capability[cube.Secrets](s, "secrets are")
	if err != nil {
		return err
	}
	info, err := sc.GetSecret(r.Context(), callerOf(r).Team, r.PathValue("secretID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireSecret(info))
	return nil
}

func (s *Server) updateSecret(w http.ResponseWriter, r *http.Request) error {
	var body wire.SecretUpdate
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	sc, err := capability[cube.Secrets](s, "secrets are")
	if err != nil {
		return err
	}
	info, err := sc.UpdateSecret(r.Context(), callerOf(r).Team, r.PathValue("secretID"), body.Value, body.Metadata)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireSecret(info))
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	sc, err := capability[cube.Secrets](s, "secrets are")
	if err != nil {
		return err
	}
	if err := sc.DeleteSecret(r.Context(), callerOf(r).Team, r.PathValue("secretID")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func wireSecret(i cube.SecretInfo) wire.Secret {
	md := i.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return wire.Secret{SecretID: i.ID, Name: i.Name, CurrentVersion: i.Version, Metadata: md,
		CreatedAt: i.CreatedAt.UTC(), UpdatedAt: i.UpdatedAt.UTC()}
}

// cubeRules and wireRules convert network.rules. A rule without a
// transform is kept (as one that sets nothing), as E2B keeps it.
func cubeRules(in map[string][]wire.NetworkRule) map[string][]cube.NetworkRule {
	if in == nil {
		return nil
	}
	out := make(map[string][]cube.NetworkRule, len(in))
	for host, rules := range in {
		list := make([]cube.NetworkRule, 0, len(rules))
		for _, r := range rules {
			var nr cube.NetworkRule
			if r.Transform != nil {
				nr.Headers = r.Transform.Headers
			}
			list = append(list, nr)
		}
		out[host] = list
	}
	return out
}

func wireRules(in map[string][]cube.NetworkRule) map[string][]wire.NetworkRule {
	if in == nil {
		return nil
	}
	out := make(map[string][]wire.NetworkRule, len(in))
	for host, rules := range in {
		list := make([]wire.NetworkRule, 0, len(rules))
		for _, r := range rules {
			var wr wire.NetworkRule
			if len(r.Headers) > 0 {
				wr.Transform = &wire.NetworkTransform{Headers: r.Headers}
			}
			list = append(list, wr)
		}
		out[host] = list
	}
	return out
}
