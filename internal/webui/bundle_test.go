package webui

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sources is where the bundle in dist is made from (make console-assets).
const sources = "../../web/console"

// TestBundleIsFresh fails when a source of the console changed (or was
// added or removed) since dist was last made: run make console-assets and
// commit dist with the change.
func TestBundleIsFresh(t *testing.T) {
	f, err := dist.Open("dist/sources.sha256")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recorded := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("sources.sha256: malformed line %q", sc.Text())
		}
		recorded[name] = sum
	}
	current := map[string]string{}
	for _, name := range []string{"index.html", "package.json", "package-lock.json"} {
		current[name] = fileSum(t, filepath.Join(sources, name))
	}
	err = filepath.WalkDir(filepath.Join(sources, "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(sources, p)
		current[filepath.ToSlash(rel)] = fileSum(t, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for name, sum := range current {
		if recorded[name] != sum {
			stale = append(stale, name)
		}
	}
	for name := range recorded {
		if _, ok := current[name]; !ok {
			stale = append(stale, name+" (removed)")
		}
	}
	slices.Sort(stale)
	if len(stale) > 0 {
		t.Errorf("internal/webui/dist is older than web/console/%s: run make console-assets and commit dist", strings.Join(stale, ", web/console/"))
	}
	// The page the server sends is the page in the sources.
	page, err := fs.ReadFile(dist, "dist/index.html")
	if err != nil {
		t.Fatal(err)
	}
	if src, err := os.ReadFile(filepath.Join(sources, "index.html")); err != nil || string(src) != string(page) {
		t.Errorf("dist/index.html differs from web/console/index.html (%v): run make console-assets", err)
	}
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// The Node page's benchmark tables are docs/BENCHMARKS.md as it is: a
// benchmark run that writes the page copies it into the bundle too.
func TestBundledBenchmarksAreCurrent(t *testing.T) {
	want, err := os.ReadFile("../../docs/BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := fs.ReadFile(dist, "dist/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("internal/webui/dist/benchmarks.md differs from docs/BENCHMARKS.md: copy it over (make console-assets does) and commit it")
	}
}
