package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"cube/internal/api/wire"
	"cube/internal/client"
)

// EnvRegistryPassword is read when --registry-password is not given, so the
// password need not appear in the process list.
const EnvRegistryPassword = "CUBE_REGISTRY_PASSWORD"

// watchInterval is how often watch asks for a job's status.
var watchInterval = 500 * time.Millisecond

func newTplCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tpl",
		Short: "Build and manage templates",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newTplCreateCmd(), newTplWatchCmd(), newTplStatusCmd(), newTplListCmd(), newTplInfoCmd(), newTplDeleteCmd())
	cmd.AddCommand(newTplBuildCmd(), newTplLogsCmd(), newTplCommitCmd())
	return cmd
}

func newTplCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create-from-image --image REF",
		Short: "Build a template from an OCI image: pull, unpack, boot, probe, snapshot",
		Long: `Build a template from an OCI image. REF is a registry reference
(docker.io/library/python:3.12-slim, localhost:5000/app:v1) or a local image:
oci-archive:PATH[:TAG], oci:DIR[:TAG], docker-archive:PATH.

The server reads local images only from its import directory. A PATH that
exists on this machine outside that directory is uploaded to the server
first, with a progress bar (a layout directory as a tar); this works for a
server on this machine or elsewhere. A PATH under the import directory
(--import-dir), or one that does not exist here, is passed to the server as
it is; a relative one is then taken relative to the import directory.

The build boots the image under gVisor, waits until GET on the probe port
and path answers 2xx, and snapshots it. --cmd replaces the image's
ENTRYPOINT and CMD (split on spaces, no shell quoting); --arg replaces its
CMD. Prints the job and template IDs; follow the build with
"tpl watch --job-id", or pass --wait.`,
		Args: cobra.NoArgs,
	}
	newClient := withClient(cmd)
	fl := cmd.Flags()
	image := fl.String("image", "", "image reference (required)")
	tplID := fl.String("template-id", "", "template ID (default: generated)")
	aliases := fl.StringArray("alias", nil, "template alias (repeatable)")
	cpu := fl.Int("cpu", 0, "CPU in millicores, rounded up to whole CPUs (default 2000)")
	memory := fl.Int("memory", 0, "memory in MB (default 512)")
	layer := fl.String("writable-layer-size", "", "size of each sandbox's writable layer, such as 1G or 512M (default 1G)")
	ports := fl.IntSlice("expose-port", nil, "port the template serves (repeatable; default the image's EXPOSE ports)")
	probe := fl.Int("probe", 0, "port whose GET answers 2xx when the template is ready to snapshot (default 49983, envd)")
	probePath := fl.String("probe-path", "", "path of the probe request (default /health)")
	command := fl.String("cmd", "", "command replacing the image's ENTRYPOINT and CMD")
	args := fl.StringArray("arg", nil, "argument replacing the image's CMD (repeatable)")
	env := fl.StringArray("env", nil, "environment variable KEY=VALUE (repeatable)")
	cwd := fl.String("cwd", "", "working directory of the start command (default the image's WORKDIR)")
	user := fl.String("user", "", "user of the start command (default the image's USER)")
	regUser := fl.String("registry-username", "", "registry user name")
	regPass := fl.String("registry-password", "", "registry password (default $"+EnvRegistryPassword+")")
	insecure := fl.Bool("insecure-registry", false, "ask for plain HTTP or an untrusted certificate; the server allows it only for registries given to its own --insecure-registry")
	importDir := fl.String("import-dir", "", "the server's import directory when the server runs on this machine: local images under it are not uploaded (default <--data-dir>/imports)")
	asJSON := fl.Bool("json", false, "print the job and template IDs as JSON")
	wait := fl.Bool("wait", false, "follow the build until it is READY or FAILED (exit status 1 on FAILED)")
	_ = cmd.MarkFlagRequired("image")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		req := wire.TemplateBuildRequest{
			Image: *image, TemplateID: *tplID, Aliases: *aliases, CPUMillicores: *cpu, MemoryMB: *memory,
			WritableLayerSize: *layer, ExposedPorts: *ports, ProbePort: *probe, ProbePath: *probePath,
			Cmd: strings.Fields(*command), Args: *args, Cwd: *cwd, User: *user,
			RegistryUsername: *regUser, RegistryPassword: *regPass, InsecureRegistry: *insecure,
		}
		if req.RegistryPassword == "" {
			req.RegistryPassword = os.Getenv(EnvRegistryPassword)
		}
		if *cpu < 0 || *memory < 0 || *probe < 0 {
			return errors.New("--cpu, --memory and --probe must be positive")
		}
		if len(*env) > 0 {
			req.Env = map[string]string{}
			for _, kv := range *env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--env %q: want KEY=VALUE", kv)
				}
				req.Env[k] = v
			}
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		if li, ok := parseLocalImage(req.Image); ok {
			dir := *importDir
			if dir == "" {
				dataDir, _ := cmd.Flags().GetString("data-dir")
				dir = filepath.Join(dataDir, "imports")
			}
			p, err := uploadTarget(li, dir)
			if err != nil {
				return err
			}
			if p != "" {
				if req.Image, err = uploadImage(cmd.Context(), c, li, p, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
		}
		started, err := c.CreateTemplate(cmd.Context(), req)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			enc.Encode(map[string]string{"job_id": started.JobID, "template_id": started.TemplateID})
		} else {
			fmt.Fprintf(out, "job_id: %s\ntemplate_id: %s\n", started.JobID, started.TemplateID)
		}
		if !*wait {
			return nil
		}
		progress := out
		if *asJSON {
			progress = cmd.ErrOrStderr() // keep stdout one JSON document
		}
		return watch(cmd, c, started.JobID, progress)
	}
	return cmd
}

// watch follows a job with a progress bar on w until it ends; FAILED is an
// error carrying the reason.
func watch(cmd *cobra.Command, c *client.Client, jobID string, w io.Writer) error {
	bar := progressbar.NewOptions(100,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetDescription(fmt.Sprintf("%-12s", "PULLING")),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetRenderBlankState(true),
	)
	j, err := c.WatchTemplateJob(cmd.Context(), jobID, watchInterval, func(j *wire.TemplateBuildJob) {
		bar.Describe(fmt.Sprintf("%-12s", j.Phase))
		bar.Set(j.Progress)
	})
	if err != nil {
		bar.Exit()
		fmt.Fprintln(w)
		return err
	}
	if j.Phase == client.PhaseFailed {
		bar.Exit()
		fmt.Fprintln(w)
		return fmt.Errorf("template %s FAILED: %s", j.TemplateID, j.Error)
	}
	bar.Finish()
	fmt.Fprintf(w, "\ntemplate %s READY\n", j.TemplateID)
	return nil
}

func newTplWatchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch --job-id ID",
		Short: "Follow a template build with a progress bar until READY or FAILED",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	jobID := cmd.Flags().String("job-id", "", "the build job")
	_ = cmd.MarkFlagRequired("job-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		return watch(cmd, c, *jobID, cmd.OutOrStdout())
	}
	return cmd
}

func newTplStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status --job-id ID",
		Short: "Show a template build's phase and progress",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	jobID := cmd.Flags().String("job-id", "", "the build job")
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	_ = cmd.MarkFlagRequired("job-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		j, err := c.TemplateJob(cmd.Context(), *jobID)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *asJSON {
			return printJSON(out, j)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 1, ' ', 0)
		fmt.Fprintf(tw, "job_id:\t%s\ntemplate_id:\t%s\nphase:\t%s\nprogress:\t%d%%\n", j.JobID, j.TemplateID, j.Phase, j.Progress)
		if j.Error != "" {
			fmt.Fprintf(tw, "error:\t%s\n", j.Error)
		}
		fmt.Fprintf(tw, "created_at:\t%s\nupdated_at:\t%s\n", stamp(j.CreatedAt), stamp(j.UpdatedAt))
		return tw.Flush()
	}
	return cmd
}

func newTplListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List templates (snapshots included)",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		ts, err := c.ListTemplates(cmd.Context())
		if err != nil {
			return err
		}
		if *asJSON {
			if ts == nil {
				ts = []wire.TemplateListed{}
			}
			return printJSON(cmd.OutOrStdout(), ts)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TEMPLATE_ID\tALIASES\tSTATUS\tCREATED_AT\tIMAGE")
		for _, t := range ts {
			status := t.Status
			if status == "" {
				status = t.BuildStatus
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.TemplateID, dash(strings.Join(t.Aliases, ",")), status, stamp(t.CreatedAt), dash(t.Image))
		}
		return tw.Flush()
	}
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newTplInfoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "info --template-id ID",
		Short: "Show one template's details as JSON",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	tplID := cmd.Flags().String("template-id", "", "template ID or alias")
	_ = cmd.MarkFlagRequired("template-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		t, err := c.GetTemplate(cmd.Context(), *tplID)
		if err != nil {
			return err
		}
		return printJSON(cmd.OutOrStdout(), t)
	}
	return cmd
}

func newTplDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete --template-id ID",
		Short: "Delete a template and its snapshot (running sandboxes keep running)",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	tplID := cmd.Flags().String("template-id", "", "template ID or alias")
	_ = cmd.MarkFlagRequired("template-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		if err := c.DeleteTemplate(cmd.Context(), *tplID); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "deleted template %s\n", *tplID)
		return nil
	}
	return cmd
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
