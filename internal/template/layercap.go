package template

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"cube/internal/oci"
)

// MaxLayerInodes bounds the entries one build step may leave in its
// layer: files, directories, symbolic links, device nodes and overlay
// whiteouts, each name counted once (a hard link too, so the count never
// falls short of the inodes used). The byte cap alone lets a step that
// makes millions of empty files use up the data filesystem's inodes,
// after which nothing on the host can create a file. A million is several
// times what a large toolchain install or node_modules tree holds.
const MaxLayerInodes = 1 << 20

// layerCheckEvery is the least time between two measurements of a
// running step's layer. A measurement walks the whole layer; one that
// takes longer is followed by a wait as long, so the watcher walks at
// most half the time. A step is thus stopped within the interval plus
// two walks of at most MaxLayerInodes entries after it passes a cap, and
// it overshoots by what it writes in that time.
const layerCheckEvery = 100 * time.Millisecond

// layerLimits bound what one build step may write to the host's disk.
type layerLimits struct{ bytes, inodes int64 }

func (b *Builder) layerLimits() layerLimits {
	return layerLimits{bytes: b.cfg.MaxLayerBytes, inodes: MaxLayerInodes}
}

// measureLayer returns the bytes and the entries under dir, or an error
// once either passes its limit, when it stops counting. Every entry's
// size counts, not only regular files': a symbolic link's target and a
// directory's own blocks take disk space too.
func measureLayer(dir string, lim layerLimits) (bytes, inodes int64, err error) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, werr error) error {
		if werr != nil {
			return nil // gone while walking: the step removed it
		}
		inodes++
		if info, err := d.Info(); err == nil {
			bytes += info.Size()
		}
		switch {
		case bytes > lim.bytes:
			err = layerTooBig(lim.bytes)
		case inodes > lim.inodes:
			err = layerTooMany(lim.inodes)
		default:
			return nil
		}
		return filepath.SkipAll
	})
	return bytes, inodes, err
}

func layerTooBig(max int64) error {
	return fmt.Errorf("the step wrote more than %s to the filesystem, the most one build step may (raise it with cube-server %s)", oci.HumanBytes(max), FlagMaxLayerBytes)
}

func layerTooMany(max int64) error {
	return fmt.Errorf("the step left more than %d files, directories and links in the filesystem, the most one build step may: remove what the image does not need (caches, build trees) in the same step", max)
}

// watchLayer ends the step (through cancel) once upper passes one of
// lim's caps; see layerCheckEvery for how soon.
func watchLayer(ctx context.Context, cancel context.CancelCauseFunc, upper string, lim layerLimits) {
	wait := layerCheckEvery
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		start := time.Now()
		if _, _, err := measureLayer(upper, lim); err != nil {
			cancel(err)
			return
		}
		wait = max(layerCheckEvery, time.Since(start))
	}
}
