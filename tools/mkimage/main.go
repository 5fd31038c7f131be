// Command mkimage packs a root filesystem directory into a single-layer OCI
// image archive (oci-archive), the form `cubemastercli tpl create-from-image
// --image oci-archive:PATH` reads. scripts/default-image.sh uses it to turn a
// debootstrap tree into the default template's image without any registry.
//
//	go run ./tools/mkimage -rootfs DIR -out IMAGE.tar -env PATH=/usr/bin:/bin -workdir /home/user
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"cube/internal/oci"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		rootfs  = flag.String("rootfs", "", "root filesystem directory to pack (required)")
		out     = flag.String("out", "", "oci-archive file to write (required)")
		workdir = flag.String("workdir", "", "image WORKDIR")
		user    = flag.String("user", "", "image USER")
		tag     = flag.String("tag", "latest", "ref name of the image inside the archive")
		gz      = flag.Bool("gzip", false, "gzip the layer (smaller, slower to write and unpack)")
		env     listFlag
		cmd     listFlag
		entry   listFlag
		expose  listFlag
	)
	flag.Var(&env, "env", "KEY=VALUE for the image ENV (repeatable)")
	flag.Var(&cmd, "cmd", "one CMD argument (repeatable)")
	flag.Var(&entry, "entrypoint", "one ENTRYPOINT argument (repeatable)")
	flag.Var(&expose, "expose", "TCP port the image EXPOSEs (repeatable)")
	flag.Parse()
	if *rootfs == "" || *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	cfg := oci.ImageConfig{Env: env, Cmd: cmd, Entrypoint: entry, WorkingDir: *workdir, User: *user}
	for _, e := range env {
		if !strings.Contains(e, "=") {
			fatal(fmt.Errorf("-env %q: want KEY=VALUE", e))
		}
	}
	for _, p := range expose {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			fatal(fmt.Errorf("-expose %q: want a port number", p))
		}
		cfg.ExposedPorts = append(cfg.ExposedPorts, n)
	}
	opts := oci.ArchiveOptions{Tag: *tag, Gzip: *gz}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fatal(fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err))
		}
		opts.Created = time.Unix(sec, 0).UTC()
	}
	start := time.Now()
	if err := oci.WriteArchive(*rootfs, *out, cfg, opts); err != nil {
		fatal(err)
	}
	st, err := os.Stat(*out)
	if err != nil {
		fatal(err)
	}
	slog.Info("image archive written", "out", *out, "bytes", st.Size(), "took", time.Since(start).Round(time.Millisecond))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mkimage:", err)
	os.Exit(1)
}
