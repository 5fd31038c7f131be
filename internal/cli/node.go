package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "See the service's nodes and take them in and out of use",
		Long: `See the service's nodes and take them in and out of use. A node that is
draining (on its way out) or on standby (isolated for now) keeps running its
sandboxes and takes no new ones; uncordon makes it ready again.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newNodeListCmd(), newNodeInfoCmd(),
		newNodeStatusCmd("drain", "draining", "Take no new sandboxes on a node that is on its way out; its sandboxes run on"),
		newNodeStatusCmd("isolate", "standby", "Set a node aside: it takes no new sandboxes until uncordoned; its sandboxes run on"),
		newNodeStatusCmd("uncordon", "ready", "Make a drained or isolated node take new sandboxes again"),
		newNodeRmCmd())
	return cmd
}

func newNodeListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List nodes, the one answering first", Args: cobra.NoArgs}
	newClient := withClient(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		nodes, err := c.ListNodes(cmd.Context())
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(cmd.OutOrStdout(), nodes)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE_ID\tSTATUS\tSANDBOXES\tSLOTS\tCPU\tMEMORY\tADDRESS\tHEARTBEAT")
		for _, n := range nodes {
			m := n.Metrics
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%d%% of %d\t%s of %s\t%s\t%s ago\n", n.ID, n.Status, n.SandboxCount,
				n.SlotsUsed, n.SlotsTotal, m.CPUPercent, m.CPUCount, humanBytes(int64(m.MemoryUsedBytes)), humanBytes(int64(m.MemoryTotalBytes)),
				n.Address, time.Since(n.HeartbeatAt).Round(time.Second))
		}
		return tw.Flush()
	}
	return cmd
}

func newNodeInfoCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "info NODE_ID", Short: "Show one node as JSON", Args: cobra.ExactArgs(1)}
	newClient := withClient(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		n, err := c.GetNode(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return printJSON(cmd.OutOrStdout(), n)
	}
	return cmd
}

// newNodeStatusCmd is a verb that gives nodes one status.
func newNodeStatusCmd(verb, status, short string) *cobra.Command {
	cmd := &cobra.Command{Use: verb + " NODE_ID...", Short: short, Args: cobra.MinimumNArgs(1)}
	newClient := withClient(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := c.SetNodeStatus(cmd.Context(), id, status); err != nil {
				return fmt.Errorf("%s %s: %w", verb, id, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", id, status)
		}
		return nil
	}
	return cmd
}

func newNodeRmCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "rm NODE_ID...", Short: "Forget nodes that no longer run (unhealthy ones)", Args: cobra.MinimumNArgs(1)}
	newClient := withClient(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := c.RemoveNode(cmd.Context(), id); err != nil {
				return fmt.Errorf("rm %s: %w", id, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: removed\n", id)
		}
		return nil
	}
	return cmd
}
