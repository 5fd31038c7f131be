package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cube/internal/client"
)

// withClient adds the flags every API verb shares (--data-dir, where the
// key file is found when no key is in the environment) and returns the
// function that builds the client once flags are parsed.
func withClient(cmd *cobra.Command) func() (*client.Client, error) {
	dataDir := cmd.Flags().String("data-dir", client.DefaultDataDir, "data directory holding the api-key file (used when CUBE_API_KEY is unset, before E2B_API_KEY)")
	return func() (*client.Client, error) { return client.FromEnv(*dataDir) }
}

func newListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List sandboxes (running and paused)",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	states := cmd.Flags().StringSlice("state", nil, "only these states (running, paused)")
	metadata := cmd.Flags().StringArray("metadata", nil, "only sandboxes with this metadata, key=value (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		md := map[string]string{}
		for _, kv := range *metadata {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("--metadata %q: want key=value", kv)
			}
			md[k] = v
		}
		for _, s := range *states {
			if s != "running" && s != "paused" {
				return fmt.Errorf("--state %q: want running or paused", s)
			}
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		items, err := c.ListSandboxes(cmd.Context(), client.ListOptions{States: *states, Metadata: md})
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTEMPLATE\tSTATE\tSTARTED\tENDS")
		for _, sb := range items {
			tpl := sb.TemplateID
			if sb.Alias != "" {
				tpl = sb.Alias
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sb.SandboxID, tpl, sb.State, stamp(sb.StartedAt), stamp(sb.EndAt))
		}
		return tw.Flush()
	}
	return cmd
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func newInfoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "info --sandbox-id ID",
		Short: "Show one sandbox's details as JSON",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	id := cmd.Flags().String("sandbox-id", "", "the sandbox to show")
	_ = cmd.MarkFlagRequired("sandbox-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		d, err := c.GetSandbox(cmd.Context(), *id)
		if err != nil {
			return err
		}
		return printJSON(cmd.OutOrStdout(), d)
	}
	return cmd
}

func newRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Kill sandboxes",
		Args:  cobra.MinimumNArgs(1),
	}
	newClient := withClient(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		return eachID(cmd, ids, "sandbox", "sandboxes", "removed", func(id string) error {
			return c.KillSandbox(cmd.Context(), id)
		})
	}
	return cmd
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
