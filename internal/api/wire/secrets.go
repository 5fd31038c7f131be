package wire

import "time"

// NewSecret is the body of POST /secrets.
type NewSecret struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// SecretUpdate is the body of POST /secrets/{secretID}.
type SecretUpdate struct {
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Secret is a secret's metadata; the API never answers with a value.
type Secret struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

// NetworkRule is one entry of network.rules: a transform of the requests
// to a matching host.
type NetworkRule struct {
	Transform *NetworkTransform `json:"transform,omitempty"`
}

// NetworkTransform sets request headers; values may hold
// ${e2b.secrets.<name>} placeholders, resolved only at egress.
type NetworkTransform struct {
	Headers map[string]string `json:"headers,omitempty"`
}
