package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"cube/internal/runtime"
	"cube/internal/store"
)

// Trust of the egress CA inside sandboxes. Every sandbox, built from an
// OCI image or by steps, has its template's agent directory mounted at
// runtime.AgentMount; the CA goes there, next to cube-envd, and the
// environment variables the common TLS stacks read point at it. Nothing
// in a template's rootfs changes, so templates and their checkpoints
// built before stay valid.
//
// SSL_CERT_FILE and its kin replace a TLS stack's trust store, so the
// bundle they name is the template's own store (a corporate CA its build
// installed included) with the egress CA added: one bundle per template,
// made when its first sandbox starts and kept in the agent directory.
// Only a template without a store of its own gets the host's.
// NODE_EXTRA_CA_CERTS adds to Node's roots, so it names the CA alone.
const (
	egressCAName     = "egress-ca.pem"
	egressBundleName = "ca-bundle.pem" // the host's store and the CA
	egressTrustDir   = "egress-trust"  // per-template bundles
)

// trustBundles are where a Linux trust store may be, first found wins:
// Debian and Ubuntu, Alpine (both), Fedora and RHEL.
var trustBundles = []string{"etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/cert.pem"}

// maxTrustBundle bounds what is read of a template's trust store.
const maxTrustBundle = 16 << 20

// installEgressTrust writes the egress CA, alone and appended to the
// host's trust store, into every agent directory sandboxes mount.
func (h *host) installEgressTrust() error {
	if h.cfg.EgressCA == nil {
		return nil
	}
	ca := h.cfg.EgressCA.CertPEM()
	system, _ := readTrust("/")
	bundle := append(append(system, '\n'), ca...)
	dirs, _ := filepath.Glob(filepath.Join(h.cfg.DataDir, "envd", "*"))
	for _, d := range dirs {
		for name, data := range map[string][]byte{egressCAName: ca, egressBundleName: bundle} {
			if err := writeIfChanged(filepath.Join(d, name), data); err != nil {
				return fmt.Errorf("egress CA into %s: %w", d, err)
			}
		}
	}
	return nil
}

// readTrust reads the trust store of the filesystem at root. Paths,
// symbolic links included, are resolved as if root were /: a link in a
// template's rootfs cannot make the host read a file of its own.
func readTrust(root string) ([]byte, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	for _, p := range trustBundles {
		fd, err := unix.Openat2(dir, p, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			continue
		}
		f := os.NewFile(uintptr(fd), filepath.Join(root, p))
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			continue
		}
		b, err := io.ReadAll(io.LimitReader(f, maxTrustBundle+1))
		f.Close()
		if err != nil || len(b) > maxTrustBundle || len(b) == 0 {
			continue
		}
		return b, nil
	}
	return nil, errors.New("no trust store")
}

// writeIfChanged replaces the file at p with data, atomically, unless it
// already holds it.
func writeIfChanged(p string, data []byte) error {
	if old, err := os.ReadFile(p); err == nil && string(old) == string(data) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// bundlesMade remembers the per-template bundles made, by host path.
var bundlesMade sync.Map

// templateBundle is the path, inside sandboxes of tpl, of the bundle
// made of tpl's own trust store (or the host's when it has none) and the
// egress CA. It is named by the template, its rootfs and the CA, so a
// rebuilt template or a new CA gets a new one.
func (h *host) templateBundle(tpl *store.Template) (string, error) {
	if tpl == nil || tpl.Rootfs == "" || tpl.Envd == "" {
		return "", errors.New("no template rootfs")
	}
	ca := h.cfg.EgressCA.CertPEM()
	sum := sha256.New()
	for _, s := range []string{tpl.ID, tpl.Rootfs, string(ca)} {
		sum.Write([]byte(s))
		sum.Write([]byte{0})
	}
	name := hex.EncodeToString(sum.Sum(nil)[:12]) + ".pem"
	onHost := filepath.Join(tpl.Envd, egressTrustDir, name)
	inside := runtime.AgentMount + "/" + egressTrustDir + "/" + name
	if _, ok := bundlesMade.Load(onHost); ok {
		return inside, nil
	}
	own, err := readTrust(tpl.Rootfs)
	if err != nil {
		if own, err = readTrust("/"); err != nil {
			own = nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(onHost), 0o755); err != nil {
		return "", err
	}
	if err := writeIfChanged(onHost, append(append(own, '\n'), ca...)); err != nil {
		return "", err
	}
	bundlesMade.Store(onHost, true)
	return inside, nil
}

// egressTrustEnv adds to the environment of a sandbox of tpl the
// variables that make OpenSSL, Python, Node, curl and Go trust the egress
// CA as well as what tpl trusts; a variable the user set is kept.
func (h *host) egressTrustEnv(tpl *store.Template, env map[string]string) map[string]string {
	if h.cfg.EgressCA == nil {
		return env
	}
	bundle, err := h.templateBundle(tpl)
	if err != nil {
		id := ""
		if tpl != nil {
			id = tpl.ID
		}
		h.log.Warn("egress trust: the template's own trust store cannot be used; its sandboxes trust the host's", "template", id, "err", err)
		bundle = runtime.AgentMount + "/" + egressBundleName
	}
	add := map[string]string{
		"SSL_CERT_FILE":       bundle,
		"REQUESTS_CA_BUNDLE":  bundle,
		"CURL_CA_BUNDLE":      bundle,
		"NODE_EXTRA_CA_CERTS": runtime.AgentMount + "/" + egressCAName,
	}
	out := make(map[string]string, len(env)+len(add))
	for k, v := range add {
		out[k] = v
	}
	for k, v := range env {
		out[k] = v
	}
	return out
}
