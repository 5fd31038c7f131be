package wire

import "time"

// Team is one team as GET /teams lists it (E2B's Team, plus Cube's
// createdAt and quotas). APIKey is the key the request presented when the
// team is the caller's own, and empty for the other teams an admin sees:
// keys are kept only as digests.
type Team struct {
	TeamID    string    `json:"teamID"`
	Name      string    `json:"name"`
	APIKey    string    `json:"apiKey"`
	IsDefault bool      `json:"isDefault"`
	CreatedAt time.Time `json:"createdAt"`
	Quotas    Quotas    `json:"quotas"`
}

// NewTeam is the body of POST /teams.
type NewTeam struct {
	Name   string  `json:"name"`
	Quotas *Quotas `json:"quotas,omitempty"`
}

// Quotas are a team's limits; 0 (or absent) is no limit.
type Quotas struct {
	RunningSandboxes  int     `json:"runningSandboxes"`
	VCPUs             int     `json:"vcpus"`
	MemoryMB          int     `json:"memoryMB"`
	MaxTimeoutSeconds int     `json:"maxTimeoutSeconds"`
	DiskBytes         int64   `json:"diskBytes"`
	Builds            int     `json:"builds"`
	RequestsPerSecond float64 `json:"requestsPerSecond"`
}

// NewTeamAPIKey is the body of POST /api-keys and of PATCH
// /api-keys/{apiKeyID} (E2B's NewTeamAPIKey and UpdateTeamAPIKey).
type NewTeamAPIKey struct {
	Name string `json:"name"`
}

// IdentifierMaskingDetails is what is shown of a key.
type IdentifierMaskingDetails struct {
	Prefix            string `json:"prefix"`
	ValueLength       int    `json:"valueLength"`
	MaskedValuePrefix string `json:"maskedValuePrefix"`
	MaskedValueSuffix string `json:"maskedValueSuffix"`
}

// TeamAPIKey is a key as its team lists it. CreatedBy names the key that
// made it (Cube's keys are made by keys, not users); null for the key made
// at first start.
type TeamAPIKey struct {
	ID        string                   `json:"id"`
	Name      string                   `json:"name"`
	Mask      IdentifierMaskingDetails `json:"mask"`
	CreatedAt time.Time                `json:"createdAt"`
	CreatedBy *TeamUser                `json:"createdBy"`
	LastUsed  *time.Time               `json:"lastUsed"`
	Admin     bool                     `json:"admin"`
}

// CreatedTeamAPIKey answers the creation of a key: the only answer that
// carries the key.
type CreatedTeamAPIKey struct {
	ID        string                   `json:"id"`
	Key       string                   `json:"key"`
	Mask      IdentifierMaskingDetails `json:"mask"`
	Name      string                   `json:"name"`
	CreatedAt time.Time                `json:"createdAt"`
	CreatedBy *TeamUser                `json:"createdBy"`
	LastUsed  *time.Time               `json:"lastUsed"`
}

// AdminSandboxKillResult answers POST /admin/teams/{teamID}/sandboxes/kill.
type AdminSandboxKillResult struct {
	KilledCount int `json:"killedCount"`
	FailedCount int `json:"failedCount"`
}

// AdminBuildCancelResult answers POST /admin/teams/{teamID}/builds/cancel.
type AdminBuildCancelResult struct {
	CancelledCount int `json:"cancelledCount"`
	FailedCount    int `json:"failedCount"`
}

// AuditEntry is one change made through the API, as GET /audit lists it.
type AuditEntry struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	TeamID  string    `json:"teamID"`
	KeyID   string    `json:"keyID"`
	KeyName string    `json:"keyName"`
	Method  string    `json:"method"`
	Route   string    `json:"route"`
	Target  string    `json:"target"`
	Status  int       `json:"status"`
	Node    string    `json:"node"`
}
