package cli

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cube/internal/api/wire"
)

func newVolumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "Manage persistent volumes and the files in them",
		Long: `Persistent volumes are filesystems of their own that outlive sandboxes:
mount one into a sandbox with volumeMounts on create. A volume is named by
its name or its ID (vol-...).`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newVolumeCreateCmd(), newVolumeListCmd(), newVolumeInfoCmd(), newVolumeRmCmd(),
		newVolumeLsCmd(), newVolumeGetCmd(), newVolumePutCmd())
	return cmd
}

func newVolumeCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create NAME [--size-mb N]",
		Short: "Create a volume (its size is a hard cap: writes past it fail with ENOSPC)",
		Args:  cobra.ExactArgs(1),
	}
	newClient := withClient(cmd)
	size := cmd.Flags().Int64("size-mb", 0, "capacity in MiB (default: the server's --volume-size)")
	asJSON := cmd.Flags().Bool("json", false, "print the volume as JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		v, err := c.CreateVolume(cmd.Context(), args[0], *size)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(cmd.OutOrStdout(), v)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "volume_id: %s\nname: %s\nsize: %s\n", v.VolumeID, v.Name, humanBytes(v.SizeMB<<20))
		return nil
	}
	return cmd
}

func newVolumeListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List volumes by name",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		vs, err := c.ListVolumes(cmd.Context())
		if err != nil {
			return err
		}
		if *asJSON {
			if vs == nil {
				vs = []wire.Volume{}
			}
			return printJSON(cmd.OutOrStdout(), vs)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VOLUME_ID\tNAME\tSIZE\tCREATED_AT")
		for _, v := range vs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.VolumeID, v.Name, humanBytes(v.SizeMB<<20), stamp(v.CreatedAt))
		}
		return tw.Flush()
	}
	return cmd
}

func newVolumeInfoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "info NAME|ID",
		Short: "Show a volume: size, use and the token of its content routes",
		Args:  cobra.ExactArgs(1),
	}
	newClient := withClient(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		id, err := c.ResolveVolume(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		v, err := c.GetVolume(cmd.Context(), id)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(cmd.OutOrStdout(), v)
		}
		used := "-"
		if v.UsedMB != nil {
			used = humanBytes(*v.UsedMB << 20)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "volume_id: %s\nname: %s\nsize: %s\nused: %s\ncreated_at: %s\ntoken: %s\n",
			v.VolumeID, v.Name, humanBytes(v.SizeMB<<20), used, stamp(v.CreatedAt), v.Token)
		return nil
	}
	return cmd
}

func newVolumeRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm NAME|ID...",
		Short: "Delete volumes and their files (refused while a sandbox or snapshot mounts one)",
		Args:  cobra.MinimumNArgs(1),
	}
	newClient := withClient(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		return eachID(cmd, args, "volume", "volumes", "deleted", func(arg string) error {
			id, err := c.ResolveVolume(cmd.Context(), arg)
			if err != nil {
				return err
			}
			return c.DeleteVolume(cmd.Context(), id)
		})
	}
	return cmd
}

func newVolumeLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls NAME|ID [PATH]",
		Short: "List a directory of a volume (default its root)",
		Args:  cobra.RangeArgs(1, 2),
	}
	newClient := withClient(cmd)
	depth := cmd.Flags().Int("depth", 1, "levels to descend (1 to 10)")
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		id, err := c.ResolveVolume(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		path := "/"
		if len(args) == 2 {
			path = args[1]
		}
		es, err := c.ListVolumeDir(cmd.Context(), id, path, *depth)
		if err != nil {
			return err
		}
		if *asJSON {
			if es == nil {
				es = []wire.VolumeEntryStat{}
			}
			return printJSON(cmd.OutOrStdout(), es)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tMODE\tOWNER\tSIZE\tMODIFIED\tPATH")
		for _, e := range es {
			p := e.Path
			if e.Target != "" {
				p += " -> " + e.Target
			}
			fmt.Fprintf(tw, "%s\t%04o\t%d:%d\t%d\t%s\t%s\n", e.Type, e.Mode, e.UID, e.GID, e.Size, stamp(e.Mtime), p)
		}
		return tw.Flush()
	}
	return cmd
}

func newVolumeGetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get NAME|ID PATH [--output FILE]",
		Short: "Copy a file out of a volume (to standard output by default)",
		Args:  cobra.ExactArgs(2),
	}
	newClient := withClient(cmd)
	output := cmd.Flags().StringP("output", "o", "-", "where to write the file (- for standard output)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		id, err := c.ResolveVolume(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		var w io.Writer = cmd.OutOrStdout()
		if *output != "-" {
			f, err := os.Create(*output)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		return c.ReadVolumeFile(cmd.Context(), id, args[1], w)
	}
	return cmd
}

func newVolumePutCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "put NAME|ID PATH [FILE]",
		Short: "Copy a file into a volume (from standard input without FILE)",
		Args:  cobra.RangeArgs(2, 3),
	}
	newClient := withClient(cmd)
	force := cmd.Flags().Bool("force", false, "replace a file that exists and make missing directories")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		id, err := c.ResolveVolume(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		var r io.Reader = cmd.InOrStdin()
		if len(args) == 3 && args[2] != "-" {
			f, err := os.Open(args[2])
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		e, err := c.WriteVolumeFile(cmd.Context(), id, args[1], r, *force)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s (%d bytes)\n", e.Path, e.Size)
		return nil
	}
	return cmd
}
