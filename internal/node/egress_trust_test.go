package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/egress"
	"cube/internal/runtime"
	"cube/internal/store"
)

// trustNode is a node with an egress CA, and a template whose rootfs
// holds files (name → content; a value "->target" is a symbolic link).
func trustNode(t *testing.T, files map[string]string) (*Node, *store.Template) {
	t.Helper()
	ca, err := egress.OpenCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for name, v := range files {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if target, ok := strings.CutPrefix(v, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tpl := &store.Template{ID: "tpl-" + filepath.Base(root), Rootfs: root, Envd: t.TempDir()}
	return &Node{host: &host{cfg: Config{EgressCA: ca}, log: slog.Default()}}, tpl
}

// bundleOf is the bundle a sandbox of tpl is pointed at, read on the host.
func bundleOf(t *testing.T, n *Node, tpl *store.Template, env map[string]string) (map[string]string, string) {
	t.Helper()
	got := n.egressTrustEnv(tpl, env)
	inside := got["SSL_CERT_FILE"]
	rel, ok := strings.CutPrefix(inside, runtime.AgentMount+"/")
	if !ok {
		t.Fatalf("SSL_CERT_FILE %q is not in the agent directory", inside)
	}
	b, err := os.ReadFile(filepath.Join(tpl.Envd, rel))
	if err != nil {
		t.Fatalf("the bundle named by SSL_CERT_FILE: %v", err)
	}
	return got, string(b)
}

const corporateCA = "-----BEGIN CERTIFICATE-----\ncorporate root the template installed\n-----END CERTIFICATE-----\n"

func TestEgressTrustKeepsTheTemplatesOwnStore(t *testing.T) {
	n, tpl := trustNode(t, map[string]string{"etc/ssl/certs/ca-certificates.crt": corporateCA})
	env, bundle := bundleOf(t, n, tpl, map[string]string{"CURL_CA_BUNDLE": "/mine.pem", "A": "b"})
	ca := string(n.cfg.EgressCA.CertPEM())
	if !strings.HasPrefix(bundle, corporateCA) || !strings.HasSuffix(bundle, ca) {
		t.Errorf("bundle is not the template's store and the egress CA:\n%s", bundle)
	}
	if env["REQUESTS_CA_BUNDLE"] != env["SSL_CERT_FILE"] || env["CURL_CA_BUNDLE"] != "/mine.pem" || env["A"] != "b" ||
		env["NODE_EXTRA_CA_CERTS"] != runtime.AgentMount+"/"+egressCAName {
		t.Errorf("environment %v", env)
	}
	// Another template gets its own bundle.
	n2, other := trustNode(t, map[string]string{"etc/ssl/certs/ca-certificates.crt": "other store\n"})
	other.Envd = tpl.Envd
	n2.cfg.EgressCA = n.cfg.EgressCA
	if _, b := bundleOf(t, n2, other, nil); !strings.HasPrefix(b, "other store\n") {
		t.Errorf("the second template's bundle:\n%s", b)
	}
}

func TestEgressTrustFollowsLinksOnlyInsideTheRootfs(t *testing.T) {
	// A Fedora-style store: an absolute link, meant within the rootfs.
	n, tpl := trustNode(t, map[string]string{
		"etc/pki/tls/certs/ca-bundle.crt":                  "->/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem": corporateCA,
	})
	if _, bundle := bundleOf(t, n, tpl, nil); !strings.HasPrefix(bundle, corporateCA) {
		t.Errorf("an absolute link inside the rootfs was not followed there:\n%s", bundle)
	}

	// A link aimed at a host file must not carry it into a sandbox.
	hostFile := filepath.Join(t.TempDir(), "host-only")
	os.WriteFile(hostFile, []byte("host secret\n"), 0o600)
	n, tpl = trustNode(t, map[string]string{"etc/ssl/certs/ca-certificates.crt": "->" + hostFile})
	_, bundle := bundleOf(t, n, tpl, nil)
	if strings.Contains(bundle, "host secret") {
		t.Fatal("the bundle holds a host file a template's link points at")
	}
	// With no store of its own, the template gets the host's.
	host, _ := readTrust("/")
	if want := string(host) + "\n" + string(n.cfg.EgressCA.CertPEM()); bundle != want {
		t.Errorf("a template without a store got %d bytes, want the host's store and the CA (%d bytes)", len(bundle), len(want))
	}
}
