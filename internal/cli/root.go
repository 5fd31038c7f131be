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
		Use:   "cubemastercli",
		Short: "Operate a Cube sandbox service",
		Long: `Operate a Cube sandbox service.

The server is $CUBE_API_URL (default http://127.0.0.1:3000). The API key is
the first of: $CUBE_API_KEY; the api-key file in --data-dir (default
/var/lib/cube), readable on the server's machine as root; $E2B_API_KEY. The
E2B variable comes last because in an E2B user's shell it usually holds the key
of their E2B cloud account, which is not sent to Cube while a key of Cube's own
is at hand.`,
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
	root.AddCommand(newCACmd(), newNodeCmd(), newVolumeCmd(), newTeamCmd(), newKeyCmd())
	return root
}
