package cube

import (
	"context"
	"io"
	"time"
)

// StepBuilder is implemented by backends that build templates the way
// E2B's SDK template builder asks (without it those routes are
// Unsupported). A build goes in three calls: RequestBuild reserves a
// template (a new one, or a new build of the one a name already names) and
// a build ID; the files of COPY steps are uploaded, each by its hash; then
// StartBuild runs the steps. The template keeps serving its previous build
// until the new one is ready.
//
// Templates and builds belong to a team (the team argument, the empty team
// being the node, which sees every one). Another team's private template,
// and another team's build of any template, are answered NotFound, the
// answer for one that does not exist; another team's public template may
// be built from (FromTemplate) and its tags read, but changing it (tags,
// public, files) → Forbidden.
type StepBuilder interface {
	// RequestBuild reserves a build of req.Team's template req.Name. The
	// name may end in ":tag", which counts as one more tag. Names are
	// the team's own: another team's template of the same name is another
	// template. A name held by a snapshot or by a template still building
	// → Conflict.
	RequestBuild(ctx context.Context, req BuildIntent) (*BuildTicket, error)
	// FilesPresent reports whether the files of a COPY step, named by the
	// SDK's hash of them, are already stored. Unknown template → NotFound.
	FilesPresent(ctx context.Context, team, templateID, hash string) (bool, error)
	// PutFiles stores a COPY step's files: a tar archive, gzipped or not.
	// Larger than MaxFilesBytes → TooLarge; not a tar archive → Invalid.
	// With verify, hash is the SHA-256 of the tar (ungzipped), as
	// cubemastercli names files; another archive → Invalid, and nothing is
	// stored. (The SDKs' hash covers the step's source and destination and
	// the stat data of the source tree, which no upload carries, so their
	// uploads cannot be checked.) Files already stored under hash are kept
	// and the upload discarded. It takes no team: an upload comes through
	// a link signed for one template ID (IDs are unique across teams),
	// handed out only after FilesPresent checked the team.
	PutFiles(ctx context.Context, templateID, hash string, body io.Reader, verify bool) error
	MaxFilesBytes() int64
	// StartBuild runs a requested build in the background. Unknown
	// template or build → NotFound; a build already started → Conflict;
	// a COPY step whose files were never uploaded → Invalid; a
	// FromTemplate that is neither the team's nor public → Invalid, as
	// one that does not exist.
	StartBuild(ctx context.Context, team, templateID, buildID string, spec BuildSpec) error
	// BuildStatus returns a build's status and its log entries from
	// logsOffset on (the number of entries the caller has already seen).
	BuildStatus(ctx context.Context, team, templateID, buildID string, logsOffset int) (*BuildStatus, error)
	// BuildLogs returns a build's log entries, oldest first, filtered by
	// the query.
	BuildLogs(ctx context.Context, team, templateID, buildID string, q BuildLogQuery) ([]BuildLogEntry, error)
	// AssignTags gives tags to the build that target ("name" or
	// "name:tag") names and returns that build's ID.
	AssignTags(ctx context.Context, team, target string, tags []string) (buildID string, err error)
	// RemoveTags removes tags from the template name names.
	RemoveTags(ctx context.Context, team, name string, tags []string) error
	// TemplateTags lists the tags of a template, by ID or name: the
	// team's own or a public one.
	TemplateTags(ctx context.Context, team, idOrName string) ([]TemplateTag, error)
	// SetPublic records whether a template is public and returns its
	// names.
	SetPublic(ctx context.Context, team, idOrName string, public bool) ([]string, error)
}

// BuildCanceller is implemented by backends that can stop a team's
// builds, as E2B's POST /admin/teams/{teamID}/builds/cancel does.
type BuildCanceller interface {
	// CancelBuilds stops every build of team that has not ended (image
	// builds and builds by steps, requested, waiting or running); each
	// ends FAILED with the error "cancelled by the admin", cleaned up as a
	// failed build is. cancelled counts the builds stopped, failed those
	// that could not be (that finished anyway). Other teams' builds are
	// left alone.
	CancelBuilds(ctx context.Context, team string) (cancelled, failed int, err error)
}

// BuildIntent is a request for a new build of a template.
type BuildIntent struct {
	// Team builds the template: its names are looked up among the team's
	// templates, and a new template and the build job are the team's.
	Team string
	// Name is the template's name, optionally with ":tag".
	Name     string
	Tags     []string
	CPUCount int
	MemoryMB int
}

// BuildTicket is a reserved build.
type BuildTicket struct {
	TemplateID string
	BuildID    string
	// Names are the template's names (its aliases).
	Names  []string
	Tags   []string
	Public bool
}

// BuildSpec is what a build runs: a base (an image or another template),
// steps, and how the finished template starts.
type BuildSpec struct {
	// Exactly one of FromImage and FromTemplate is set.
	FromImage        string
	FromTemplate     string
	RegistryUsername string
	RegistryPassword string
	Steps            []BuildStep
	// StartCmd runs (by a shell) when the template is snapshotted;
	// ReadyCmd is retried until it exits 0 before the snapshot is taken.
	StartCmd string
	ReadyCmd string
	// Force reruns every step instead of taking it from the cache.
	Force bool
}

// Step types of BuildStep.
const (
	StepRun     = "RUN"
	StepCopy    = "COPY"
	StepEnv     = "ENV"
	StepWorkdir = "WORKDIR"
	StepUser    = "USER"
)

// BuildStep is one step of a build, in the SDK's terms: RUN [cmd, user?],
// COPY [src, dest, user?, mode?] with FilesHash, ENV [k1, v1, k2, v2...],
// WORKDIR [dir], USER [name].
type BuildStep struct {
	Type      string
	Args      []string
	FilesHash string
	// Force reruns this step, and so every later one, instead of taking
	// it from the cache.
	Force bool
}

// Build statuses, as E2B names them.
const (
	BuildWaiting  = "waiting"
	BuildBuilding = "building"
	BuildReady    = "ready"
	BuildError    = "error"
)

// BuildLogEntry is one line of a build's log.
type BuildLogEntry struct {
	Time time.Time
	// Level is debug, info, warn or error.
	Level   string
	Message string
	// Step is "base", a step's number (1-based) or "finalize".
	Step string
}

// BuildStatus is where a build is.
type BuildStatus struct {
	TemplateID string
	BuildID    string
	// Status is waiting, building, ready or error.
	Status string
	Logs   []BuildLogEntry
	// Reason says why a build failed.
	Reason *BuildReason
	// QueuePosition is the number of builds ahead of a waiting one.
	QueuePosition int
}

// BuildReason is why a build failed: a message, the step, and the last
// lines of its log.
type BuildReason struct {
	Message string
	Step    string
	Logs    []BuildLogEntry
}

// BuildLogQuery selects build log entries.
type BuildLogQuery struct {
	// Cursor is a time in Unix milliseconds: entries from it on (forward)
	// or up to it (backward); zero means the start (forward) or now.
	Cursor   int64
	Limit    int
	Backward bool
	// Level is the lowest level returned; empty means all.
	Level string
}

// TemplateTag is a tag and the build it names.
type TemplateTag struct {
	Tag       string
	BuildID   string
	CreatedAt time.Time
}
