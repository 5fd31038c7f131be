package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Op names of the pause-resume rows: the in-memory resume keeps the name
// it always had; a resume from the pause image on disk gets its own.
const (
	opResume         = "resume"
	opResumeFromDisk = "resume (from disk)"
	// A pause without memory and the fresh boot that resumes it.
	opPauseFiles  = "pause (files only)"
	opResumeFiles = "resume (files only)"
)

// pauseImageWait says how pause-resume --from-disk waits for the server
// to write a paused sandbox to disk (after its --pause-write-delay, 10 s
// by default): it looks for the image every Poll, for at most Limit, then
// lets the server finish the write-out for Grace. The server publishes the
// image first, then records the sandbox as paused on disk and retires its
// frozen container, all under the sandbox's lock, so a resume sent before
// that would wait for it and bill the write-out's tail to the resume.
var pauseImageWait = struct {
	Poll, Limit, Grace time.Duration
}{Poll: 50 * time.Millisecond, Limit: 60 * time.Second, Grace: time.Second}

// pauseImage is where the server keeps the pause image of a sandbox.
func pauseImage(dataDir, id string) string {
	return filepath.Join(dataDir, "sandboxes", id, "pause", "checkpoint.img")
}

// waitPauseImages waits until every sandbox of ids has a pause image
// written no earlier than since (an older one is a previous round's).
func waitPauseImages(ctx context.Context, dataDir string, ids []string, since time.Time) error {
	w := pauseImageWait
	deadline := time.Now().Add(w.Limit)
	pending := append([]string(nil), ids...)
	for {
		var still []string
		for _, id := range pending {
			fi, err := os.Stat(pauseImage(dataDir, id))
			if err != nil || fi.ModTime().Before(since) {
				still = append(still, id)
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("--from-disk: the pause image of sandbox %s never appeared at %s within %s: pass the server's data directory with --data-dir (now %q) and check that its --pause-write-delay is shorter than that",
				pending[0], pauseImage(dataDir, pending[0]), w.Limit, dataDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.Poll):
		}
	}
	if w.Grace > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.Grace):
		}
	}
	return nil
}
