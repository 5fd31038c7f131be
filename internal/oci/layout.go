package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// A blobStore reads the files of an image layout or a docker-save archive,
// either from a directory or straight out of a tar without unpacking it.
type blobStore interface {
	// open returns the named file (slash-separated, relative) and its size.
	open(name string) (io.ReadCloser, int64, error)
	String() string
}

type dirStore struct{ dir string }

// WithinDir reports whether path p is dir or lies under it, both clean
// and absolute; it looks at the names only.
func WithinDir(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

func (d dirStore) String() string { return d.dir }

func (d dirStore) open(name string) (io.ReadCloser, int64, error) {
	if !fs.ValidPath(name) {
		return nil, 0, fmt.Errorf("%w: %s refers to %q, outside the layout", ErrCorrupt, d.dir, name)
	}
	// A layout may link between its own files, but never to a file outside
	// it: the layout may come from anyone, the server reads as root.
	root, err := filepath.EvalSymlinks(d.dir)
	if err != nil {
		return nil, 0, err
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		return nil, 0, err
	}
	if !WithinDir(root, real) {
		return nil, 0, fmt.Errorf("%w: %s/%s is a symbolic link to %s, outside the layout", ErrCorrupt, d.dir, name, real)
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s/%s is not a regular file", d.dir, name)
	}
	return f, st.Size(), nil
}

// tarStore indexes a tar once and then serves each member as a section of
// the file, so a multi-gigabyte archive is never copied or unpacked whole.
type tarStore struct {
	path    string
	entries map[string]tarEntry
}

type tarEntry struct {
	off, size int64
	link      string // for symlinks and hard links: the member it points to
}

func (t *tarStore) String() string { return t.path }

// seekCounter tracks the file position so the offset of each member's data
// is known, while still letting archive/tar seek over data it skips.
type seekCounter struct {
	f   *os.File
	pos int64
}

func (s *seekCounter) Read(p []byte) (int, error) {
	n, err := s.f.Read(p)
	s.pos += int64(n)
	return n, err
}

func (s *seekCounter) Seek(off int64, whence int) (int64, error) {
	p, err := s.f.Seek(off, whence)
	if err == nil {
		s.pos = p
	}
	return p, err
}

func openTarStore(p string) (*tarStore, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := &seekCounter{f: f}
	tr := tar.NewReader(sc)
	t := &tarStore{path: p, entries: map[string]tarEntry{}}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not a readable tar archive: %w", p, err)
		}
		name := cleanMember(h.Name)
		switch h.Typeflag {
		case tar.TypeReg:
			t.entries[name] = tarEntry{off: sc.pos, size: h.Size}
		case tar.TypeSymlink:
			target := h.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			t.entries[name] = tarEntry{link: target}
		case tar.TypeLink:
			t.entries[name] = tarEntry{link: cleanMember(h.Linkname)}
		}
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%s: archive holds no files", p)
	}
	return t, nil
}

func cleanMember(n string) string {
	return strings.TrimPrefix(path.Clean("/"+n), "/")
}

func (t *tarStore) open(name string) (io.ReadCloser, int64, error) {
	name = cleanMember(name)
	e, ok := t.entries[name]
	for hops := 0; ok && e.link != ""; hops++ {
		if hops > 16 {
			return nil, 0, fmt.Errorf("%s: too many links resolving %s", t.path, name)
		}
		e, ok = t.entries[cleanMember(e.link)]
	}
	if !ok {
		return nil, 0, fmt.Errorf("%s: no member %s: %w", t.path, name, fs.ErrNotExist)
	}
	f, err := os.Open(t.path)
	if err != nil {
		return nil, 0, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, e.off, e.size), f}, e.size, nil
}

// readAll reads a small metadata file, refusing anything absurdly large so a
// hostile archive cannot make us allocate gigabytes.
func readAll(st blobStore, name string) ([]byte, error) {
	rc, size, err := st.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	const max = 64 << 20
	if size > max {
		return nil, fmt.Errorf("%s: %s is %d bytes, too large for metadata", st, name, size)
	}
	return io.ReadAll(rc)
}

func blobName(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// readBlob reads a small blob and checks it against its digest.
func readBlob(st blobStore, d v1.Descriptor) ([]byte, error) {
	if _, err := v1.NewHash(d.Digest.String()); err != nil {
		return nil, fmt.Errorf("%w: %s: bad digest %q", ErrCorrupt, st, d.Digest)
	}
	b, err := readAll(st, blobName(d.Digest))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s lacks blob %s", ErrCorrupt, st, d.Digest)
		}
		return nil, err
	}
	vr, err := newVerifyReader(bytes.NewReader(b), d.Digest, d.Size, "blob "+d.Digest.String()+" in "+st.String())
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(io.Discard, vr); err != nil {
		return nil, err
	}
	return b, nil
}

const refNameAnnotation = "org.opencontainers.image.ref.name"

// openLayout picks one image out of an OCI image layout: the one tagged tag,
// or the only one when tag is empty, resolving multi-platform indexes for plat.
func openLayout(st blobStore, tag string, plat v1.Platform) (v1.Image, error) {
	if b, err := readAll(st, "oci-layout"); err != nil || !bytes.Contains(b, []byte("imageLayoutVersion")) {
		return nil, fmt.Errorf("%w: %s is not an OCI image layout (no valid oci-layout file)", ErrNotFound, st)
	}
	b, err := readAll(st, "index.json")
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not an OCI image layout: %v", ErrNotFound, st, err)
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: index.json: %v", ErrCorrupt, st, err)
	}
	var tags []string
	var pick *v1.Descriptor
	for i, d := range idx.Manifests {
		t := d.Annotations[refNameAnnotation]
		if t != "" {
			tags = append(tags, t)
		}
		if tag != "" && (t == tag || strings.HasSuffix(t, ":"+tag)) && pick == nil {
			pick = &idx.Manifests[i]
		}
	}
	switch {
	case tag != "" && pick == nil:
		return nil, fmt.Errorf("%w: %s has no image tagged %q (tags: %s)", ErrNotFound, st, tag, listOrNone(tags))
	case tag == "" && len(idx.Manifests) == 0:
		return nil, fmt.Errorf("%w: %s holds no images", ErrNotFound, st)
	case tag == "" && len(idx.Manifests) > 1:
		return nil, fmt.Errorf("%w: %s holds %d images; name one with oci:DIR:TAG (tags: %s)", ErrNotFound, st, len(idx.Manifests), listOrNone(tags))
	case tag == "":
		pick = &idx.Manifests[0]
	}
	return resolveDescriptor(st, *pick, plat, 0)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func resolveDescriptor(st blobStore, d v1.Descriptor, plat v1.Platform, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, fmt.Errorf("%w: %s: image indexes nested too deep", ErrCorrupt, st)
	}
	raw, err := readBlob(st, d)
	if err != nil {
		return nil, err
	}
	switch {
	case d.MediaType.IsIndex():
		idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: index %s: %v", ErrCorrupt, st, d.Digest, err)
		}
		child, err := pickPlatform(idx.Manifests, plat)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", st, err)
		}
		return resolveDescriptor(st, child, plat, depth+1)
	case d.MediaType.IsImage():
		m, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: manifest %s: %v", ErrCorrupt, st, d.Digest, err)
		}
		cfg, err := readBlob(st, m.Config)
		if err != nil {
			return nil, err
		}
		return newStoreImage(st, d.MediaType, raw, m, cfg, nil)
	default:
		return nil, fmt.Errorf("%s: %s has media type %q, which is not an image", st, d.Digest, d.MediaType)
	}
}

// pickPlatform chooses the entry of a multi-platform index that runs here.
func pickPlatform(ds []v1.Descriptor, want v1.Platform) (v1.Descriptor, error) {
	var seen []string
	for _, d := range ds {
		if d.Platform == nil {
			continue
		}
		seen = append(seen, d.Platform.String())
		if d.Platform.OS == want.OS && d.Platform.Architecture == want.Architecture &&
			(want.Variant == "" || d.Platform.Variant == want.Variant) {
			return d, nil
		}
	}
	if len(ds) == 1 && ds[0].Platform == nil {
		return ds[0], nil
	}
	return v1.Descriptor{}, fmt.Errorf("%w: no image for platform %s (available: %s)", ErrNotFound, want.String(), listOrNone(seen))
}

// storeImage is an image whose blobs live in a blobStore. diffIDs come from
// the config; paths overrides where a layer's blob lives (docker-save
// archives name layers by path rather than by digest).
type storeImage struct {
	st        blobStore
	mediaType types.MediaType
	manifest  []byte
	m         *v1.Manifest
	config    []byte
	diffIDs   []v1.Hash
	paths     map[v1.Hash]string
}

func newStoreImage(st blobStore, mt types.MediaType, raw []byte, m *v1.Manifest, cfg []byte, paths map[v1.Hash]string) (v1.Image, error) {
	cf, err := v1.ParseConfigFile(bytes.NewReader(cfg))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: image config: %v", ErrCorrupt, st, err)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("%w: %s: manifest lists %d layers but the config %d", ErrCorrupt, st, len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	if mt == "" {
		mt = types.OCIManifestSchema1
	}
	return partial.CompressedToImage(&storeImage{st: st, mediaType: mt, manifest: raw, m: m, config: cfg, diffIDs: cf.RootFS.DiffIDs, paths: paths})
}

func (s *storeImage) RawConfigFile() ([]byte, error)      { return s.config, nil }
func (s *storeImage) MediaType() (types.MediaType, error) { return s.mediaType, nil }
func (s *storeImage) RawManifest() ([]byte, error)        { return s.manifest, nil }

func (s *storeImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == s.m.Config.Digest {
		return &storeLayer{img: s, desc: s.m.Config}, nil
	}
	for i, l := range s.m.Layers {
		if l.Digest == h {
			return &storeLayer{img: s, desc: l, diffID: s.diffIDs[i]}, nil
		}
	}
	return nil, fmt.Errorf("%w: %s: no layer %s in the manifest", ErrNotFound, s.st, h)
}

type storeLayer struct {
	img    *storeImage
	desc   v1.Descriptor
	diffID v1.Hash
}

func (l *storeLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *storeLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *storeLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *storeLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

func (l *storeLayer) Compressed() (io.ReadCloser, error) {
	name, ok := l.img.paths[l.desc.Digest]
	if !ok {
		name = blobName(l.desc.Digest)
	}
	rc, _, err := l.img.st.open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s lacks layer %s", ErrCorrupt, l.img.st, l.desc.Digest)
		}
		return nil, err
	}
	vr, err := newVerifyReader(rc, l.desc.Digest, l.desc.Size, "layer "+l.desc.Digest.String()+" in "+l.img.st.String())
	if err != nil {
		rc.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{vr, rc}, nil
}

// dockerManifest is one entry of a docker-save manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// openDockerArchive reads `docker save` output. Its layers are usually plain
// tars; they are presented as uncompressed OCI layers (digest = diffID), which
// avoids compressing gigabytes just to compute digests nobody needs.
func openDockerArchive(st blobStore) (v1.Image, error) {
	b, err := readAll(st, "manifest.json")
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a docker-save archive (no manifest.json): %v", ErrNotFound, st, err)
	}
	var ms []dockerManifest
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("%w: %s: manifest.json: %v", ErrCorrupt, st, err)
	}
	if len(ms) != 1 {
		var tags []string
		for _, m := range ms {
			tags = append(tags, m.RepoTags...)
		}
		return nil, fmt.Errorf("%w: %s holds %d images (tags: %s); save exactly one image", ErrNotFound, st, len(ms), listOrNone(tags))
	}
	dm := ms[0]
	cfg, err := readAll(st, dm.Config)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: config %s: %v", ErrCorrupt, st, dm.Config, err)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(cfg))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: image config: %v", ErrCorrupt, st, err)
	}
	if len(cf.RootFS.DiffIDs) != len(dm.Layers) {
		return nil, fmt.Errorf("%w: %s: manifest.json lists %d layers but the config %d", ErrCorrupt, st, len(dm.Layers), len(cf.RootFS.DiffIDs))
	}
	cfgHash, _, err := v1.SHA256(bytes.NewReader(cfg))
	if err != nil {
		return nil, err
	}
	m := &v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cfg)), Digest: cfgHash},
	}
	paths := map[v1.Hash]string{}
	for i, p := range dm.Layers {
		d, err := describeDockerLayer(st, p, cf.RootFS.DiffIDs[i])
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, d)
		paths[d.Digest] = p
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return newStoreImage(st, types.OCIManifestSchema1, raw, m, cfg, paths)
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

func describeDockerLayer(st blobStore, p string, diffID v1.Hash) (v1.Descriptor, error) {
	rc, size, err := st.open(p)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%w: %s: layer %s: %v", ErrCorrupt, st, p, err)
	}
	defer rc.Close()
	head := make([]byte, 4)
	n, _ := io.ReadFull(rc, head)
	head = head[:n]
	mt := types.OCIUncompressedLayer
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		mt = types.OCILayer
	case bytes.HasPrefix(head, zstdMagic):
		mt = types.OCILayerZStd
	default:
		return v1.Descriptor{MediaType: mt, Size: size, Digest: diffID}, nil
	}
	// A compressed member: its digest is unknown until hashed.
	h, _, err := v1.SHA256(io.MultiReader(bytes.NewReader(head), rc))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: layer %s: %w", st, p, err)
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: h}, nil
}
