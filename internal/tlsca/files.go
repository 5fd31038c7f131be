package tlsca

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// checkEvery bounds how often a handshake looks at the files: a stat of
// two files per handshake would be waste, a second's delay after a renewal
// is not.
const checkEvery = time.Second

// Files serves a certificate and key the operator supplies (--tls-cert, --tls-key), reloading them when
// either file's modification time changes (checked at most once a second), so a renewal by another tool
// (certbot, cert-manager, a cron job) needs no restart. A bad pair at reload keeps the previous one and
// logs nothing itself (returns it from Reload).
type Files struct {
	certFile, keyFile string
	now               func() time.Time // tests inject a clock

	mu      sync.Mutex
	cert    *tls.Certificate
	certMod time.Time // modification times of the pair last tried, good or bad
	keyMod  time.Time
	checked time.Time
	loadErr error // why the pair last tried was refused; nil when it is served
	statErr error // why the files could not be looked at, at the last look
}

// LoadFiles loads certFile and keyFile (PEM; certFile may hold the chain
// after the leaf). Unlike a reload, a bad pair here is an error: there is
// nothing older to serve.
func LoadFiles(certFile, keyFile string) (*Files, error) {
	f := &Files{certFile: certFile, keyFile: keyFile, now: time.Now}
	certMod, keyMod, err := f.stat()
	if err != nil {
		return nil, err
	}
	c, err := f.load()
	if err != nil {
		return nil, err
	}
	f.cert, f.certMod, f.keyMod, f.checked = c, certMod, keyMod, f.now()
	return f, nil
}

// GetCertificate is tls.Config.GetCertificate: the pair last loaded well,
// after a reload if a file changed since the last look (at most once a
// second). It serves every ServerName: the operator chose the names.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); now.Sub(f.checked) >= checkEvery || now.Before(f.checked) {
		f.checked = now
		f.reloadIfChanged()
	}
	return f.cert, nil
}

// Reload looks at the files now (not waiting for the next second) and
// loads them if either changed. It returns why the pair on disk is not
// being served, also when a handshake found that out first, so the server
// can log it (on SIGHUP, or from time to time); nil means the files on
// disk are what is served.
func (f *Files) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked = f.now()
	f.reloadIfChanged()
	if f.statErr != nil {
		return f.statErr
	}
	return f.loadErr
}

// reloadIfChanged runs under mu. It stats before reading, so a file
// written between the two is read again at the next look rather than
// missed.
func (f *Files) reloadIfChanged() {
	certMod, keyMod, err := f.stat()
	if err != nil {
		// Perhaps mid-rotation (a file moved away and back): keep the old
		// times so the next look tries again.
		f.statErr = err
		return
	}
	f.statErr = nil
	if certMod.Equal(f.certMod) && keyMod.Equal(f.keyMod) {
		return
	}
	f.certMod, f.keyMod = certMod, keyMod
	c, err := f.load()
	if err != nil {
		f.loadErr = err
		return
	}
	f.cert, f.loadErr = c, nil
}

func (f *Files) stat() (certMod, keyMod time.Time, err error) {
	ci, err := os.Stat(f.certFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("tls: certificate: %w", err)
	}
	ki, err := os.Stat(f.keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("tls: key: %w", err)
	}
	return ci.ModTime(), ki.ModTime(), nil
}

func (f *Files) load() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", f.certFile, f.keyFile, err)
	}
	return &c, nil
}
