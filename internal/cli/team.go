package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cube/internal/api/wire"
)

func newTeamCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "team",
		Short: "Manage teams and their quotas (admin key)",
		Long: `Manage teams and their quotas. A team owns its API keys, sandboxes,
templates, snapshots, volumes, secrets and builds; nothing of one team is
visible to another. Creating, removing and setting the quotas of teams needs
an admin key (the server's key is one); any key lists its own team.

Quotas bound what a team holds at once; 0 is no limit.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTeamCreateCmd(), newTeamListCmd(), newTeamRmCmd(), newTeamQuotaCmd())
	return cmd
}

// quotaFlags are the flags of team create and team quota, one a quota.
type quotaFlags struct {
	cmd                        *cobra.Command
	running, vcpus, mem, build *int
	timeout                    *time.Duration
	disk                       *int64
	rps                        *float64
}

func addQuotaFlags(cmd *cobra.Command) *quotaFlags {
	fl := cmd.Flags()
	return &quotaFlags{
		cmd:     cmd,
		running: fl.Int("running", 0, "running sandboxes at once (0: no limit)"),
		vcpus:   fl.Int("vcpus", 0, "vCPUs of the running sandboxes together (0: no limit)"),
		mem:     fl.Int("memory-mb", 0, "memory of the running sandboxes together, in MB (0: no limit)"),
		timeout: fl.Duration("max-timeout", 0, "longest lifetime a sandbox may ask for, such as 1h, in whole seconds (0: no limit)"),
		disk:    fl.Int64("disk-bytes", 0, "bytes of templates, snapshots, pause images and volumes together (0: no limit)"),
		build:   fl.Int("builds", 0, "template builds in progress at once (0: no limit)"),
		rps:     fl.Float64("rps", 0, "sustained API requests per second of each key (0: no limit)"),
	}
}

// apply sets in q the quotas whose flags were given and reports whether
// any was.
func (f *quotaFlags) apply(q *wire.Quotas) (bool, error) {
	if *f.running < 0 || *f.vcpus < 0 || *f.mem < 0 || *f.timeout < 0 || *f.disk < 0 || *f.build < 0 || *f.rps < 0 {
		return false, errors.New("quotas cannot be negative (0 is no limit)")
	}
	if *f.timeout%time.Second != 0 {
		return false, fmt.Errorf("--max-timeout %s: want whole seconds", *f.timeout)
	}
	changed := false
	set := func(name string, do func()) {
		if f.cmd.Flags().Changed(name) {
			do()
			changed = true
		}
	}
	set("running", func() { q.RunningSandboxes = *f.running })
	set("vcpus", func() { q.VCPUs = *f.vcpus })
	set("memory-mb", func() { q.MemoryMB = *f.mem })
	set("max-timeout", func() { q.MaxTimeoutSeconds = int(*f.timeout / time.Second) })
	set("disk-bytes", func() { q.DiskBytes = *f.disk })
	set("builds", func() { q.Builds = *f.build })
	set("rps", func() { q.RequestsPerSecond = *f.rps })
	return changed, nil
}

func newTeamCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a team, with the quotas given (admin key)",
		Long: `Create a team, with the quotas given; a quota not given is no limit. The
team starts without keys: make one with "key create NAME --team TEAM_ID".`,
		Args: cobra.ExactArgs(1),
	}
	newClient := withClient(cmd)
	qf := addQuotaFlags(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var q wire.Quotas
		given, err := qf.apply(&q)
		if err != nil {
			return err
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		var qp *wire.Quotas
		if given {
			qp = &q
		}
		t, err := c.CreateTeam(cmd.Context(), args[0], qp)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *asJSON {
			return printJSON(out, t)
		}
		if err := printTeams(out, []wire.Team{*t}); err != nil {
			return err
		}
		fmt.Fprintf(out, "Make its first API key with: cubemastercli key create NAME --team %s\n", t.TeamID)
		return nil
	}
	return cmd
}

func newTeamListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List teams with their quotas (every team for an admin key, else the key's own)",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		teams, err := c.ListTeams(cmd.Context())
		if err != nil {
			return err
		}
		if *asJSON {
			if teams == nil {
				teams = []wire.Team{}
			}
			return printJSON(cmd.OutOrStdout(), teams)
		}
		return printTeams(cmd.OutOrStdout(), teams)
	}
	return cmd
}

// printTeams writes teams as a table, one column a quota ("-" for none).
func printTeams(w io.Writer, teams []wire.Team) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEAM_ID\tNAME\tRUNNING\tVCPUS\tMEMORY\tMAX_TIMEOUT\tDISK\tBUILDS\tRPS\tCREATED_AT")
	for _, t := range teams {
		q := t.Quotas
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.TeamID, t.Name,
			quota(q.RunningSandboxes), quota(q.VCPUs), humanBytes(int64(q.MemoryMB)<<20),
			timeoutQuota(q.MaxTimeoutSeconds), humanBytes(q.DiskBytes), quota(q.Builds), rpsQuota(q.RequestsPerSecond),
			stamp(t.CreatedAt))
	}
	return tw.Flush()
}

func quota(n int) string {
	if n <= 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func timeoutQuota(s int) string {
	if s <= 0 {
		return "-"
	}
	return (time.Duration(s) * time.Second).String()
}

func rpsQuota(f float64) string {
	if f <= 0 {
		return "-"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func newTeamRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm TEAM_ID...",
		Short: "Remove teams and their keys (admin key)",
		Long: `Remove teams and their keys. A team that still owns sandboxes, templates,
snapshots or volumes is kept, and the server names them; the first team,
which holds the server's key, cannot be removed.`,
		Args: cobra.MinimumNArgs(1),
	}
	newClient := withClient(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		return eachID(cmd, ids, "team", "teams", "removed", func(id string) error {
			return c.DeleteTeam(cmd.Context(), id)
		})
	}
	return cmd
}

func newTeamQuotaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota TEAM_ID",
		Short: "Show a team's quotas, or change those given (admin key to change)",
		Long: `Show a team's quotas, or change those given: a quota whose flag is not
given keeps its value, and 0 removes a limit.`,
		Args: cobra.ExactArgs(1),
	}
	newClient := withClient(cmd)
	qf := addQuotaFlags(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var probe wire.Quotas
		if _, err := qf.apply(&probe); err != nil {
			return err // refuse bad flags before asking the server
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		t, err := c.GetTeam(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		q := t.Quotas
		changed, _ := qf.apply(&q)
		if changed {
			if t, err = c.SetQuotas(cmd.Context(), t.TeamID, q); err != nil {
				return err
			}
		}
		if *asJSON {
			return printJSON(cmd.OutOrStdout(), t)
		}
		return printTeams(cmd.OutOrStdout(), []wire.Team{*t})
	}
	return cmd
}

// withTeam adds --team to a key verb: the team an admin key acts for.
func withTeam(cmd *cobra.Command) *string {
	return cmd.Flags().String("team", "", "act for this team (admin key; default the key's own team)")
}

func newKeyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Manage API keys",
		Long: `Manage API keys. Without --team a verb acts on the keys of the key's own
team; with it, an admin key acts on that team's. A key is shown once, when it
is made: the server keeps only a digest of it.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newKeyCreateCmd(), newKeyListCmd(), newKeyRevokeCmd(), newKeyRenameCmd())
	return cmd
}

func newKeyCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Make an API key and print it, once",
		Args:  cobra.ExactArgs(1),
	}
	newClient := withClient(cmd)
	team := withTeam(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON (the notice goes to stderr)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		var k *wire.CreatedTeamAPIKey
		if *team != "" {
			k, err = c.AdminCreateKey(cmd.Context(), *team, args[0])
		} else {
			k, err = c.CreateKey(cmd.Context(), args[0])
		}
		if err != nil {
			return err
		}
		const notice = "This key will not be shown again: keep it now."
		out := cmd.OutOrStdout()
		if *asJSON {
			fmt.Fprintln(cmd.ErrOrStderr(), notice)
			return printJSON(out, k)
		}
		fmt.Fprintf(out, "key_id: %s\nname: %s\nkey: %s\n%s\n", k.ID, k.Name, k.Key, notice)
		return nil
	}
	return cmd
}

func newKeyListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List a team's API keys, masked",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	team := withTeam(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		keys, err := c.ForTeam(*team).ListKeys(cmd.Context())
		if err != nil {
			return err
		}
		if *asJSON {
			if keys == nil {
				keys = []wire.TeamAPIKey{}
			}
			return printJSON(cmd.OutOrStdout(), keys)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY_ID\tNAME\tKEY\tADMIN\tCREATED_AT\tLAST_USED\tCREATED_BY")
		for _, k := range keys {
			last, by := "-", "-"
			if k.LastUsed != nil && !k.LastUsed.IsZero() {
				last = stamp(*k.LastUsed)
			}
			if k.CreatedBy != nil && k.CreatedBy.ID != "" {
				by = k.CreatedBy.ID
			}
			admin := "no"
			if k.Admin {
				admin = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, maskedKey(k.Mask), admin, stamp(k.CreatedAt), last, by)
		}
		return tw.Flush()
	}
	return cmd
}

// maskedKey is what is shown of a key: its type prefix and the few
// characters of each end the server keeps.
func maskedKey(m wire.IdentifierMaskingDetails) string {
	if m.MaskedValuePrefix == "" && m.MaskedValueSuffix == "" {
		return m.Prefix + strings.Repeat("*", 4)
	}
	return m.Prefix + m.MaskedValuePrefix + "..." + m.MaskedValueSuffix
}

func newKeyRevokeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke KEY_ID...",
		Short: "Revoke API keys: every node refuses them within a second",
		Args:  cobra.MinimumNArgs(1),
	}
	newClient := withClient(cmd)
	team := withTeam(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		return eachID(cmd, ids, "key", "keys", "revoked", func(id string) error {
			if *team != "" {
				return c.AdminDeleteKey(cmd.Context(), *team, id)
			}
			return c.DeleteKey(cmd.Context(), id)
		})
	}
	return cmd
}

func newKeyRenameCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rename KEY_ID NAME",
		Short: "Rename an API key",
		Args:  cobra.ExactArgs(2),
	}
	newClient := withClient(cmd)
	team := withTeam(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		if err := c.ForTeam(*team).RenameKey(cmd.Context(), args[0], args[1]); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: renamed to %s\n", args[0], args[1])
		return nil
	}
	return cmd
}
