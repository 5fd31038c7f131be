package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cube/internal/api/wire"
	"cube/internal/client"
)

// defaultResumeTimeout is the end time a resumed sandbox gets unless
// --timeout says otherwise; the same default the E2B SDKs use for connect.
const defaultResumeTimeout = 300

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Snapshot running sandboxes and manage their snapshots",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newSnapshotCreateCmd(), newSnapshotListCmd(), newSnapshotDeleteCmd())
	return cmd
}

func newSnapshotCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --sandbox-id ID [--name NAME]",
		Short: "Snapshot a running sandbox's memory and files; it keeps running",
		Long: `Snapshot a running sandbox's memory and files; the sandbox keeps running
with the same processes. The snapshot ID (or its name) is a template ID:
create sandboxes from it, or roll the sandbox back to it with "rollback".`,
		Args: cobra.NoArgs,
	}
	newClient := withClient(cmd)
	id := cmd.Flags().String("sandbox-id", "", "the sandbox to snapshot (required)")
	name := cmd.Flags().String("name", "", "a name for the snapshot, usable in place of its ID")
	asJSON := cmd.Flags().Bool("json", false, "print the snapshot as JSON")
	_ = cmd.MarkFlagRequired("sandbox-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		snap, err := c.CreateSnapshot(cmd.Context(), *id, *name)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(cmd.OutOrStdout(), snap)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "snapshot_id: %s\nnames: %s\n", snap.SnapshotID, dash(strings.Join(snap.Names, ",")))
		return nil
	}
	return cmd
}

func newSnapshotListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List snapshots, newest first, with the disk each uses",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	id := cmd.Flags().String("sandbox-id", "", "only snapshots taken of this sandbox")
	name := cmd.Flags().String("name", "", "only the snapshot with this ID or name")
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		snaps, err := c.ListSnapshots(cmd.Context(), client.SnapshotFilter{SandboxID: *id, Name: *name})
		if err != nil {
			return err
		}
		if *asJSON {
			if snaps == nil {
				snaps = []wire.SnapshotInfo{}
			}
			return printJSON(cmd.OutOrStdout(), snaps)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SNAPSHOT_ID\tNAMES\tSANDBOX_ID\tSIZE\tCREATED_AT")
		for _, s := range snaps {
			created := "-"
			if s.CreatedAt != nil {
				created = stamp(*s.CreatedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.SnapshotID, dash(strings.Join(s.Names, ",")), dash(s.SandboxID), humanBytes(s.SizeBytes), created)
		}
		return tw.Flush()
	}
	return cmd
}

func newSnapshotDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete ID...",
		Short: "Delete snapshots and free their disk (sandboxes created from them keep running)",
		Args:  cobra.MinimumNArgs(1),
	}
	newClient := withClient(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		return eachID(cmd, ids, "snapshot", "snapshots", "deleted", func(id string) error {
			return c.DeleteSnapshot(cmd.Context(), id)
		})
	}
	return cmd
}

func newRollbackCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollback --sandbox-id ID --snapshot-id SNAP",
		Short: "Return a sandbox in place to a snapshot it took",
		Long: `Return a sandbox's memory and files in place to a snapshot the sandbox
itself took. Its ID, access token, metadata, end time and address stay.`,
		Args: cobra.NoArgs,
	}
	newClient := withClient(cmd)
	id := cmd.Flags().String("sandbox-id", "", "the sandbox to roll back (required)")
	snap := cmd.Flags().String("snapshot-id", "", "the snapshot to return to, by ID or name (required)")
	asJSON := cmd.Flags().Bool("json", false, "print the result as JSON")
	_ = cmd.MarkFlagRequired("sandbox-id")
	_ = cmd.MarkFlagRequired("snapshot-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		res, err := c.Rollback(cmd.Context(), *id, *snap)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(cmd.OutOrStdout(), res)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "sandbox %s rolled back to %s (status %s, operation %s)\n", res.SandboxID, res.SnapshotID, dash(res.Status), dash(res.OperationID))
		return nil
	}
	return cmd
}

func newPauseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause ID...",
		Short: "Pause sandboxes: write memory and files to disk and free their memory",
		Args:  cobra.MinimumNArgs(1),
	}
	newClient := withClient(cmd)
	noMemory := cmd.Flags().Bool("no-memory", false, "keep only the files; resuming boots the sandbox afresh")
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		return eachID(cmd, ids, "sandbox", "sandboxes", "paused", func(id string) error {
			return c.PauseSandbox(cmd.Context(), id, !*noMemory)
		})
	}
	return cmd
}

func newResumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused sandbox (a running one only has its end time extended)",
		Args:  cobra.ExactArgs(1),
	}
	newClient := withClient(cmd)
	timeout := cmd.Flags().Int("timeout", defaultResumeTimeout, "seconds the sandbox runs from now before its end time")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *timeout < 0 {
			return fmt.Errorf("--timeout %d: want seconds, 0 or more", *timeout)
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		_, resumed, err := c.ConnectSandbox(cmd.Context(), args[0], *timeout)
		if err != nil {
			return err
		}
		if resumed {
			fmt.Fprintf(cmd.OutOrStdout(), "%s resumed\n", args[0])
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "%s was already running\n", args[0])
		}
		return nil
	}
	return cmd
}

func newCloneCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "clone --sandbox-id ID --count N",
		Short: "Start N copies of a running sandbox from one checkpoint of it",
		Long: `Checkpoint a running sandbox once and start N new sandboxes from it, each
with the parent's memory and files and its own ID. The parent keeps running.
Prints one line per child: its ID, or the reason it failed; exits non-zero
when any child failed.`,
		Args: cobra.NoArgs,
	}
	newClient := withClient(cmd)
	id := cmd.Flags().String("sandbox-id", "", "the sandbox to clone (required)")
	count := cmd.Flags().Int("count", 0, "how many copies, 1 to 100 (required)")
	concurrency := cmd.Flags().Int("concurrency", 0, "how many copies start at once (default: the server's)")
	timeout := cmd.Flags().Int("timeout", 0, "seconds each copy runs before its end time (default: the server's)")
	asJSON := cmd.Flags().Bool("json", false, "print the children as JSON")
	_ = cmd.MarkFlagRequired("sandbox-id")
	_ = cmd.MarkFlagRequired("count")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *count < 1 {
			return fmt.Errorf("--count %d: want 1 or more", *count)
		}
		if *concurrency < 0 {
			return fmt.Errorf("--concurrency %d: want 1 or more", *concurrency)
		}
		if *timeout < 0 {
			return fmt.Errorf("--timeout %d: want seconds, 1 or more", *timeout)
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		children, err := c.CloneSandbox(cmd.Context(), *id, client.CloneOptions{Count: *count, Concurrency: *concurrency, TimeoutSec: *timeout})
		if err != nil {
			return err
		}
		failed := 0
		for _, ch := range children {
			if ch.Sandbox == nil {
				failed++
			}
		}
		if *asJSON {
			if children == nil {
				children = []wire.ForkResult{}
			}
			if err := printJSON(cmd.OutOrStdout(), children); err != nil {
				return err
			}
		} else {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SANDBOX_ID\tERROR")
			for _, ch := range children {
				switch {
				case ch.Sandbox != nil:
					fmt.Fprintf(tw, "%s\t-\n", ch.Sandbox.SandboxID)
				case ch.Error != nil:
					fmt.Fprintf(tw, "-\t%d: %s\n", ch.Error.Code, oneLine(ch.Error.Message))
				default:
					fmt.Fprintf(tw, "-\tno sandbox and no error in the answer\n")
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if failed > 0 {
			return fmt.Errorf("%d of %s failed", failed, plural(len(children), "clone", "clones"))
		}
		return nil
	}
	return cmd
}

// eachID applies fn to every id, printing "<id>" on success and the error
// on stderr otherwise, so one bad id does not stop the others; the verb
// fails when any id failed.
func eachID(cmd *cobra.Command, ids []string, one, many, done string, fn func(string) error) error {
	failed := 0
	for _, id := range ids {
		if err := fn(id); err != nil {
			failed++
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", id, err)
			continue
		}
		fmt.Fprintln(cmd.OutOrStdout(), id)
	}
	if failed > 0 {
		return errors.New(plural(failed, one, many) + " not " + done)
	}
	return nil
}

// oneLine keeps a server message on one table row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// humanBytes renders a byte count in binary units with one decimal, the way
// operators read disk use ("4.0 MiB"); 0 is "-" since the server omits sizes
// it does not know.
func humanBytes(n int64) string {
	if n <= 0 {
		return "-"
	}
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n) / 1024
	i := 0
	// Compare against 1023.95 so a value that would print as "1024.0"
	// moves up a unit instead.
	for v >= 1023.95 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}
