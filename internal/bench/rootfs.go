package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TemplateRootfs finds the read-only rootfs a template's sandboxes run on:
// the server reports the image digest, and the data directory keeps one
// unpacked rootfs per digest under rootfs/<hex>.
func TemplateRootfs(ctx context.Context, c *Client, dataDir, template string) (string, error) {
	t, err := c.Template(ctx, template)
	if err != nil {
		return "", fmt.Errorf("looking up template %s: %w", template, err)
	}
	d := t.ImageDigest
	if d == "" {
		return "", fmt.Errorf("template %s has no image digest (a snapshot?); pass --rootfs", template)
	}
	_, hex, ok := strings.Cut(d, ":")
	if !ok {
		hex = d
	}
	dir := filepath.Join(dataDir, "rootfs", hex)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("rootfs of template %s not found at %s; pass --rootfs or --data-dir", template, dir)
	}
	return dir, nil
}
