package envd_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "cube/internal/envd/gen/filesystem"
)

// Relative paths name files in the acting user's home (root's here), as
// on E2B, whatever the default workdir.
func TestStatMakeDirMoveRemove(t *testing.T) {
	s := newSandbox(t)
	ctx := s.ctx()
	os.WriteFile(s.inHome("a.txt"), []byte("hello"), 0o640)
	os.Symlink("a.txt", s.inHome("link"))

	st, err := s.fsJS.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: s.rel("a.txt")}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.GetEntry()
	if e.GetName() != "a.txt" || e.GetPath() != s.inHome("a.txt") || e.GetType() != fspb.FileType_FILE_TYPE_FILE ||
		e.GetSize() != 5 || e.GetMode() != 0o640 || e.GetPermissions() != "-rw-r-----" || e.GetOwner() == "" || e.GetModifiedTime() == nil {
		t.Fatalf("stat: %v", e)
	}
	st, err = s.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: s.inHome("link")}))
	if err != nil {
		t.Fatal(err)
	}
	// A link is what it points at, with its target (TestSymlinkEntries).
	if st.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_FILE || st.Msg.GetEntry().GetSymlinkTarget() != s.inHome("a.txt") {
		t.Fatalf("stat of a link: %v", st.Msg.GetEntry())
	}
	_, err = s.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: s.rel("missing")}))
	wantCode(t, err, connect.CodeNotFound)

	md, err := s.fsJS.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: s.rel("x/y/z")}))
	if err != nil {
		t.Fatal(err)
	}
	if md.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY || md.Msg.GetEntry().GetPath() != s.inHome("x/y/z") {
		t.Fatalf("makedir: %v", md.Msg.GetEntry())
	}
	_, err = s.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: s.rel("x/y/z")}))
	wantCode(t, err, connect.CodeAlreadyExists)
	_, err = s.fs.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: s.rel("a.txt")}))
	wantCode(t, err, connect.CodeInvalidArgument)

	mv, err := s.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: s.rel("a.txt"), Destination: s.rel("x/moved.txt")}))
	if err != nil {
		t.Fatal(err)
	}
	if mv.Msg.GetEntry().GetPath() != s.inHome("x/moved.txt") {
		t.Fatalf("move: %v", mv.Msg.GetEntry())
	}
	if b, _ := os.ReadFile(s.inHome("x/moved.txt")); string(b) != "hello" {
		t.Fatalf("moved file holds %q", b)
	}
	_, err = s.fs.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: s.rel("a.txt"), Destination: s.rel("b.txt")}))
	wantCode(t, err, connect.CodeNotFound)

	if _, err := s.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: s.rel("x")})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.inHome("x")); !os.IsNotExist(err) {
		t.Fatalf("x still there: %v", err)
	}
	// Removing what is not there is done already, as on E2B.
	if _, err := s.fs.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: s.rel("x")})); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

// A symbolic link is described as E2B's agent does, by what it points at,
// which every SDK release decodes; a link to nothing is FILE_TYPE_SYMLINK
// only to SDKs that know that type (e2b 2.36.0 in JS, 2.35.0 in Python,
// by their User-Agent), and FILE_TYPE_UNSPECIFIED to the rest.
func TestSymlinkEntries(t *testing.T) {
	s := newSandbox(t)
	os.MkdirAll(s.inHome("l/realdir"), 0o750)
	os.WriteFile(s.inHome("l/target.txt"), []byte("12345"), 0o640)
	os.Symlink("target.txt", s.inHome("l/link.txt"))
	os.Symlink("realdir", s.inHome("l/linkdir"))
	os.Symlink("missing", s.inHome("l/dangling"))

	type got struct {
		typ    fspb.FileType
		target string
		mode   uint32
	}
	for _, tc := range []struct {
		agent      string
		danglingAs fspb.FileType
	}{
		{"", fspb.FileType_FILE_TYPE_UNSPECIFIED},
		{"connect-go/1.18.1 (go1.26)", fspb.FileType_FILE_TYPE_UNSPECIFIED},
		{"e2b-js-sdk/1.13.2", fspb.FileType_FILE_TYPE_UNSPECIFIED},
		{"e2b-js-sdk/2.35.3", fspb.FileType_FILE_TYPE_UNSPECIFIED},
		{"e2b-js-sdk/2.36.0", fspb.FileType_FILE_TYPE_SYMLINK},
		{"e2b-js-sdk/2.51.0 e2b-code-interpreter/2.8.0", fspb.FileType_FILE_TYPE_SYMLINK},
		{"e2b-js-sdk/10.0.0-beta.1", fspb.FileType_FILE_TYPE_SYMLINK},
		{"e2b-python-sdk/2.34.0", fspb.FileType_FILE_TYPE_UNSPECIFIED},
		{"e2b-python-sdk/2.35.0", fspb.FileType_FILE_TYPE_SYMLINK},
		{"connect-python", fspb.FileType_FILE_TYPE_UNSPECIFIED},
	} {
		s.headers = http.Header{"User-Agent": {tc.agent}}
		want := map[string]got{
			"target.txt": {fspb.FileType_FILE_TYPE_FILE, "", 0o640},
			"link.txt":   {fspb.FileType_FILE_TYPE_FILE, s.inHome("l/target.txt"), 0o640},
			"realdir":    {fspb.FileType_FILE_TYPE_DIRECTORY, "", 0o750},
			"linkdir":    {fspb.FileType_FILE_TYPE_DIRECTORY, s.inHome("l/realdir"), 0o750},
			"dangling":   {tc.danglingAs, s.inHome("l/missing"), 0o777},
		}
		// The JSON codec, as the SDKs use: the answer decodes, whatever it holds.
		res, err := s.fsJS.ListDir(s.ctx(), connect.NewRequest(&fspb.ListDirRequest{Path: s.rel("l")}))
		if err != nil {
			t.Fatalf("%q: list: %v", tc.agent, err)
		}
		listed := map[string]got{}
		for _, e := range res.Msg.GetEntries() {
			listed[e.GetName()] = got{e.GetType(), e.GetSymlinkTarget(), e.GetMode()}
		}
		if !reflect.DeepEqual(listed, want) {
			t.Errorf("%q: listed %v, want %v", tc.agent, listed, want)
		}
		for name, w := range want {
			st, err := s.fsJS.Stat(s.ctx(), connect.NewRequest(&fspb.StatRequest{Path: s.rel("l/" + name)}))
			if err != nil {
				t.Fatalf("%q: stat %s: %v", tc.agent, name, err)
			}
			e := st.Msg.GetEntry()
			if g := (got{e.GetType(), e.GetSymlinkTarget(), e.GetMode()}); g != w {
				t.Errorf("%q: stat %s: %v, want %v", tc.agent, name, g, w)
			}
		}
	}
}

func TestListDirDepth(t *testing.T) {
	s := newSandbox(t)
	for _, p := range []string{"d/e/f/g.txt", "d/top.txt", "d/e/mid.txt"} {
		os.MkdirAll(s.inHome(filepath.Dir(p)), 0o755)
		os.WriteFile(s.inHome(p), nil, 0o644)
	}
	names := func(depth uint32) []string {
		res, err := s.fsJS.ListDir(s.ctx(), connect.NewRequest(&fspb.ListDirRequest{Path: s.rel("d"), Depth: depth}))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range res.Msg.GetEntries() {
			rel, _ := filepath.Rel(s.inHome("d"), e.GetPath())
			out = append(out, rel)
		}
		sort.Strings(out)
		return out
	}
	if got := names(0); !equal(got, []string{"e", "top.txt"}) {
		t.Fatalf("depth 0: %v", got)
	}
	if got := names(1); !equal(got, []string{"e", "top.txt"}) {
		t.Fatalf("depth 1: %v", got)
	}
	if got := names(2); !equal(got, []string{"e", "e/f", "e/mid.txt", "top.txt"}) {
		t.Fatalf("depth 2: %v", got)
	}
	if got := names(10); !equal(got, []string{"e", "e/f", "e/f/g.txt", "e/mid.txt", "top.txt"}) {
		t.Fatalf("depth 10: %v", got)
	}
	_, err := s.fs.ListDir(s.ctx(), connect.NewRequest(&fspb.ListDirRequest{Path: s.rel("d/top.txt")}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = s.fs.ListDir(s.ctx(), connect.NewRequest(&fspb.ListDirRequest{Path: s.rel("nope")}))
	wantCode(t, err, connect.CodeNotFound)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPermissionDeniedForUser(t *testing.T) {
	needRoot(t)
	s := newSandbox(t)
	private := filepath.Join(s.dir, "private")
	os.Mkdir(private, 0o700)
	os.WriteFile(filepath.Join(private, "secret"), []byte("x"), 0o600)
	// The sandbox dir's parents are root-only too; open the way down to
	// private itself so only its own mode decides.
	for d := s.dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	s.user = "nobody"
	_, err := s.fs.Stat(s.ctx(), connect.NewRequest(&fspb.StatRequest{Path: filepath.Join(private, "secret")}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = s.fs.ListDir(s.ctx(), connect.NewRequest(&fspb.ListDirRequest{Path: private}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = s.fs.Remove(s.ctx(), connect.NewRequest(&fspb.RemoveRequest{Path: filepath.Join(private, "secret")}))
	wantCode(t, err, connect.CodePermissionDenied)

	// What nobody creates, nobody owns.
	open := filepath.Join(s.dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	res, err := s.fs.MakeDir(s.ctx(), connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(open, "mine")}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetEntry().GetOwner() != "nobody" {
		t.Fatalf("directory made for nobody is owned by %q", res.Msg.GetEntry().GetOwner())
	}
	// Directories are made by envd, as E2B's agent makes them, even where
	// nobody could not: the new one is nobody's, mode 0755, and what
	// stood there before is untouched.
	res, err = s.fs.MakeDir(s.ctx(), connect.NewRequest(&fspb.MakeDirRequest{Path: filepath.Join(private, "sub", "deeper")}))
	if err != nil {
		t.Fatalf("make a directory below a root-only one for nobody: %v", err)
	}
	if e := res.Msg.GetEntry(); e.GetOwner() != "nobody" || e.GetPermissions() != "drwxr-xr-x" {
		t.Fatalf("directory made below a root-only one: %v", e)
	}
	ownedBy(t, filepath.Join(private, "sub"), s.nobody(), 0o755)
	ownedBy(t, private, rootUser, 0o700)
}

// Events must arrive in the order the changes happened; other events may
// be interleaved.
func TestWatchDirRecursive(t *testing.T) {
	s := newSandbox(t)
	os.MkdirAll(filepath.Join(s.dir, "w", "sub"), 0o755)
	ctx, cancel := context.WithCancel(s.ctx())
	defer cancel()
	stream, err := s.fsJS.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: filepath.Join(s.dir, "w"), Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first watch event is not start: %v %v", stream.Msg(), stream.Err())
	}
	f := filepath.Join(s.dir, "w", "sub", "f.txt")
	os.WriteFile(f, []byte("1"), 0o644)
	os.Chmod(f, 0o600)
	os.Rename(f, filepath.Join(s.dir, "w", "g.txt"))
	os.Mkdir(filepath.Join(s.dir, "w", "new"), 0o755)
	// A directory created after the watch began is watched too.
	eventuallyWatched := filepath.Join(s.dir, "w", "new", "inner.txt")

	want := []struct {
		name string
		typ  fspb.EventType
	}{
		{"sub/f.txt", fspb.EventType_EVENT_TYPE_CREATE},
		{"sub/f.txt", fspb.EventType_EVENT_TYPE_WRITE},
		{"sub/f.txt", fspb.EventType_EVENT_TYPE_CHMOD},
		{"sub/f.txt", fspb.EventType_EVENT_TYPE_RENAME},
		{"g.txt", fspb.EventType_EVENT_TYPE_CREATE},
		{"new", fspb.EventType_EVENT_TYPE_CREATE},
		{"new/inner.txt", fspb.EventType_EVENT_TYPE_CREATE},
		{"g.txt", fspb.EventType_EVENT_TYPE_REMOVE},
	}
	i := 0
	for i < len(want) {
		if !stream.Receive() {
			t.Fatalf("watch ended after %d of %d events: %v", i, len(want), stream.Err())
		}
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		if ev.GetName() == want[i].name && ev.GetType() == want[i].typ {
			if ev.GetType() == fspb.EventType_EVENT_TYPE_CREATE && ev.GetName() == "g.txt" && ev.GetEntry().GetPath() != filepath.Join(s.dir, "w", "g.txt") {
				t.Fatalf("create event without its entry: %v", ev)
			}
			i++
			switch want[i-1].name {
			case "new":
				os.WriteFile(eventuallyWatched, nil, 0o644)
			case "new/inner.txt":
				os.Remove(filepath.Join(s.dir, "w", "g.txt"))
			}
		}
	}
	_, err = s.fs.WatchDir(s.ctx(), connect.NewRequest(&fspb.WatchDirRequest{Path: filepath.Join(s.dir, "w/nope")}))
	if err == nil {
		st, _ := s.fs.WatchDir(s.ctx(), connect.NewRequest(&fspb.WatchDirRequest{Path: filepath.Join(s.dir, "w/nope")}))
		st.Receive()
		err = st.Err()
	}
	wantCode(t, err, connect.CodeNotFound)
}

func TestPollingWatcher(t *testing.T) {
	s := newSandbox(t)
	ctx := s.ctx()
	res, err := s.fsJS.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: s.dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	os.WriteFile(filepath.Join(s.dir, "polled.txt"), nil, 0o644)
	eventually(t, "a create event", func() bool {
		evs, err := s.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Msg.GetEvents() {
			if ev.GetName() == "polled.txt" && ev.GetType() == fspb.EventType_EVENT_TYPE_CREATE {
				return true
			}
		}
		return false
	})
	if _, err := s.fs.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = s.fs.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = s.fs.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: filepath.Join(s.dir, "missing")}))
	wantCode(t, err, connect.CodeNotFound)
}

// An upload makes the events E2B's agent makes on Linux (its watcher's
// test_watch_iterated counts three for a new file): a new file is created,
// given to its user (CHMOD) and written; a file that was there is given to
// its user, then truncated and written (the kernel may merge the two
// writes into one event).
func TestUploadWatchEvents(t *testing.T) {
	s := newSandbox(t)
	dir := s.inHome("up")
	os.MkdirAll(dir, 0o755)
	ctx, cancel := context.WithCancel(s.ctx())
	defer cancel()
	stream, err := s.fsJS.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first watch event is not start: %v %v", stream.Msg(), stream.Err())
	}
	events := make(chan string, 100)
	go func() {
		for stream.Receive() {
			if ev := stream.Msg().GetFilesystem(); ev != nil {
				events <- ev.GetType().String() + " " + ev.GetName()
			}
		}
		close(events)
	}()
	// upload writes data and returns the events it caused, once they stop.
	upload := func(data string) []string {
		status, body, _ := s.do("POST", "/files?path="+s.rel("up/f.txt"), strings.NewReader(data), map[string]string{"Content-Type": "application/octet-stream"})
		if status != http.StatusOK {
			t.Fatalf("upload: %d %s", status, body)
		}
		var got []string
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the watch ended: %v", stream.Err())
				}
				got = append(got, ev)
			case <-time.After(500 * time.Millisecond):
				return got
			}
		}
	}
	if got, want := upload("first"), []string{"EVENT_TYPE_CREATE f.txt", "EVENT_TYPE_CHMOD f.txt", "EVENT_TYPE_WRITE f.txt"}; !equal(got, want) {
		t.Fatalf("a new file: %v, want %v", got, want)
	}
	got := upload("second")
	if len(got) < 2 || len(got) > 3 || got[0] != "EVENT_TYPE_CHMOD f.txt" {
		t.Fatalf("a file that was there: %v, want CHMOD then WRITE (once or twice)", got)
	}
	for _, ev := range got[1:] {
		if ev != "EVENT_TYPE_WRITE f.txt" {
			t.Fatalf("a file that was there: %v, want CHMOD then WRITE (once or twice)", got)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != "second" {
		t.Fatalf("the file holds %q", b)
	}
}
