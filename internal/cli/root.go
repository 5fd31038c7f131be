// Package cli holds the cubemastercli command tree. Each verb is a thin
// layer over the Cube REST API; the server does the work.
package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"cube/internal/version"
)

// Root returns the cubemastercli command with every verb attached.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:           "cubemastercli",
		Short:         "Operate a Cube sandbox service",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the cubemastercli version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "cubemastercli", version.Version)
		},
	})
	root.AddCommand(newListCmd(), newInfoCmd(), newRmCmd(), newTplCmd())
	root.AddCommand(newSnapshotCmd(), newRollbackCmd(), newPauseCmd(), newResumeCmd(), newCloneCmd())
	root.AddCommand(newCACmd(), newNodeCmd(), newVolumeCmd())
	return root
}
