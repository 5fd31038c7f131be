package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"cube/internal/api/wire"
	"cube/internal/client"
	"cube/internal/treecopy"
)

// templateFile is what tpl build reads: the SDK's Template.toJSON() (the
// body of a build start) plus an optional name.
type templateFile struct {
	wire.TemplateBuildStartV2
	Name string `json:"name,omitempty"`
}

func newTplBuildCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "build --file template.json [--name NAME] [--context DIR] [--no-wait]",
		Short: "Build a template from steps, as the E2B SDK's Template.build does",
		Long: `Build a template from a JSON description of its steps: what the E2B SDK's
Template.toJSON() prints (fromImage or fromTemplate, steps of type RUN, COPY,
ENV, WORKDIR or USER, startCmd, readyCmd, force), plus an optional top-level
"name". --name overrides it; NAME may end in ":tag".

The files of a COPY step are its first argument, a path relative to
--context (default the file's directory). A COPY step without filesHash is
tarred here and named by the SHA-256 of the tar. Files the server does not
have yet are uploaded. Then the build starts and its log is followed until
the template is ready (exit status 1 on error, with the reason).`,
		Args: cobra.NoArgs,
	}
	newClient := withClient(cmd)
	fl := cmd.Flags()
	file := fl.String("file", "", "the template's JSON (required)")
	name := fl.String("name", "", "template name, optionally NAME:TAG (default the file's \"name\")")
	contextDir := fl.String("context", "", "directory COPY sources are relative to (default the file's directory)")
	noWait := fl.Bool("no-wait", false, "start the build and print its IDs without following it")
	_ = cmd.MarkFlagRequired("file")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		tf, err := readTemplateFile(*file)
		if err != nil {
			return err
		}
		if *name != "" {
			tf.Name = *name
		}
		if tf.Name == "" {
			return fmt.Errorf("%s has no \"name\": pass --name", *file)
		}
		if *contextDir == "" {
			*contextDir = filepath.Dir(*file)
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		return buildTemplate(cmd, c, tf, *contextDir, !*noWait)
	}
	return cmd
}

func readTemplateFile(path string) (templateFile, error) {
	var tf templateFile
	data, err := os.ReadFile(path)
	if err != nil {
		return tf, err
	}
	if err := json.Unmarshal(data, &tf); err != nil {
		return tf, fmt.Errorf("%s: %w", path, err)
	}
	return tf, nil
}

// buildTemplate requests the build, uploads the COPY steps' files, starts
// it and, with follow, prints its log until it ends.
func buildTemplate(cmd *cobra.Command, c *client.Client, tf templateFile, contextDir string, follow bool) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	ticket, err := c.RequestBuild(ctx, wire.TemplateBuildRequestV3{Name: tf.Name})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "template_id: %s\nbuild_id: %s\n", ticket.TemplateID, ticket.BuildID)
	spec := tf.TemplateBuildStartV2
	for i := range spec.Steps {
		if err := uploadStepFiles(ctx, c, ticket.TemplateID, &spec.Steps[i], contextDir, out); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	if err := c.StartBuild(ctx, ticket.TemplateID, ticket.BuildID, spec); err != nil {
		return err
	}
	if !follow {
		return nil
	}
	return followBuild(ctx, c, ticket.TemplateID, ticket.BuildID, out)
}

// uploadStepFiles tars a COPY step's source, names it by the tar's hash
// when the step has none, and uploads it unless the server has it.
func uploadStepFiles(ctx context.Context, c *client.Client, templateID string, step *wire.TemplateStep, contextDir string, out io.Writer) error {
	if step.Type != "COPY" {
		return nil
	}
	if len(step.Args) < 2 {
		return errors.New("COPY needs a source and a destination")
	}
	var archive bytes.Buffer
	if err := tarPath(contextDir, step.Args[0], &archive); err != nil {
		return err
	}
	if step.FilesHash == "" {
		sum := sha256.Sum256(archive.Bytes())
		step.FilesHash = hex.EncodeToString(sum[:])
	}
	uploaded, err := c.UploadFiles(ctx, templateID, step.FilesHash, archive.Bytes())
	if err != nil {
		return err
	}
	if uploaded {
		fmt.Fprintf(out, "uploaded %s (%s)\n", step.Args[0], humanBytes(int64(archive.Len())))
	} else {
		fmt.Fprintf(out, "%s already on the server\n", step.Args[0])
	}
	return nil
}

// tarPath writes src (a file or directory, relative to contextDir) to w as
// a tar whose names are relative to contextDir, as the SDK sends them.
// Modes are kept, so executables stay executable; symbolic links stay
// links.
func tarPath(contextDir, src string, w io.Writer) error {
	if _, err := os.Lstat(filepath.Join(contextDir, src)); err != nil {
		return fmt.Errorf("COPY source: %w", err)
	}
	return treecopy.WritePaths(w, contextDir, src)
}

// followBuild prints a build's log entries as they come, until it is
// ready, or failed (an error with the reason).
func followBuild(ctx context.Context, c *client.Client, templateID, buildID string, out io.Writer) error {
	offset := 0
	for {
		st, err := c.BuildStatus(ctx, templateID, buildID, offset)
		if err != nil {
			return err
		}
		offset += len(st.LogEntries)
		printBuildLogs(out, st.LogEntries)
		// Entries written just before the end may still be on their way;
		// the status is final only once a poll brings no more.
		if (st.Status == client.BuildReady || st.Status == client.BuildError) && len(st.LogEntries) == 0 {
			return buildOutcome(st, out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(watchInterval):
		}
	}
}

func buildOutcome(st *wire.BuildStatusInfo, out io.Writer) error {
	if st.Status == client.BuildReady {
		fmt.Fprintf(out, "template %s READY (build %s)\n", st.TemplateID, st.BuildID)
		return nil
	}
	msg := "unknown error"
	if st.Reason != nil {
		msg = st.Reason.Message
		if st.Reason.Step != "" {
			msg = fmt.Sprintf("step %s: %s", st.Reason.Step, msg)
		}
	}
	return fmt.Errorf("template %s build %s FAILED: %s", st.TemplateID, st.BuildID, msg)
}

func printBuildLogs(out io.Writer, logs []wire.BuildLogEntry) {
	for _, l := range logs {
		fmt.Fprintf(out, "%s %-5s %s\n", l.Timestamp, l.Level, l.Message)
	}
}

func newTplLogsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logs --template-id ID --build-id ID [--follow]",
		Short: "Print a step build's log; --follow until it ends",
		Args:  cobra.NoArgs,
	}
	newClient := withClient(cmd)
	templateID := cmd.Flags().String("template-id", "", "the template (required)")
	buildID := cmd.Flags().String("build-id", "", "the build (required)")
	follow := cmd.Flags().Bool("follow", false, "keep printing until the build is ready or failed (exit status 1 on error)")
	_ = cmd.MarkFlagRequired("template-id")
	_ = cmd.MarkFlagRequired("build-id")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := newClient()
		if err != nil {
			return err
		}
		if *follow {
			return followBuild(cmd.Context(), c, *templateID, *buildID, cmd.OutOrStdout())
		}
		logs, err := c.BuildLogs(cmd.Context(), *templateID, *buildID, client.BuildLogOptions{Limit: 1000})
		if err != nil {
			return err
		}
		printBuildLogs(cmd.OutOrStdout(), logs)
		return nil
	}
	return cmd
}

func newTplCommitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "commit --sandbox-id ID --alias NAME",
		Short: "Make a running sandbox a template named NAME (a snapshot of it)",
		Long: `Make a running sandbox a template: a snapshot of its memory and files named
NAME, so that Sandbox.create('NAME') starts from it. The sandbox keeps
running. Committing to a NAME again makes a new build of the same template.`,
		Args: cobra.NoArgs,
	}
	newClient := withClient(cmd)
	id := cmd.Flags().String("sandbox-id", "", "the sandbox (required)")
	alias := cmd.Flags().String("alias", "", "the template's name (required)")
	_ = cmd.MarkFlagRequired("sandbox-id")
	_ = cmd.MarkFlagRequired("alias")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if strings.TrimSpace(*alias) == "" {
			return errors.New("--alias is empty")
		}
		c, err := newClient()
		if err != nil {
			return err
		}
		snap, err := c.CreateSnapshot(cmd.Context(), *id, *alias)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "template_id: %s\nnames: %s\nSandbox.create('%s') now starts from it\n",
			snap.SnapshotID, dash(strings.Join(snap.Names, ",")), *alias)
		return nil
	}
	return cmd
}
