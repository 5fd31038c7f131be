package oci

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPlainHTTPOnlyForListedRegistries(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "tests/plain:v1", testImage(t))
	src, _ := ParseSource(ref)

	// A loopback registry is no exception.
	_, err := Open(context.Background(), src, PullOptions{})
	if !errors.Is(err, ErrInsecureRegistry) || !strings.Contains(err.Error(), "--insecure-registry "+reg.host()) {
		t.Fatalf("unlisted plain-HTTP registry: %v, want ErrInsecureRegistry naming --insecure-registry %s", err, reg.host())
	}
	// Listed, with or without its port.
	for _, entry := range []string{reg.host(), "127.0.0.1"} {
		img, err := Open(context.Background(), src, PullOptions{InsecureRegistries: []string{entry}})
		if err != nil {
			t.Fatalf("listed as %s: %v", entry, err)
		}
		if _, err := UnpackLimited(context.Background(), img, rootsDir(t), Limits{}, nil); err != nil {
			t.Fatalf("listed as %s: unpack: %v", entry, err)
		}
	}
}

func TestUntrustedTLSOnlyForListedRegistries(t *testing.T) {
	srv := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	tag, err := name.NewTag(host + "/tests/tls:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, testImage(t), remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	src, _ := ParseSource(tag.String())

	_, err = Open(context.Background(), src, PullOptions{})
	if !errors.Is(err, ErrInsecureRegistry) || !strings.Contains(err.Error(), "certificate of "+host+" is not trusted") {
		t.Fatalf("self-signed registry: %v, want ErrInsecureRegistry", err)
	}
	img, err := Open(context.Background(), src, PullOptions{InsecureRegistries: []string{host}})
	if err != nil {
		t.Fatalf("listed: %v", err)
	}
	if _, err := UnpackLimited(context.Background(), img, rootsDir(t), Limits{}, nil); err != nil {
		t.Fatalf("listed: unpack: %v", err)
	}
}

func TestInsecureAllowed(t *testing.T) {
	for _, c := range []struct {
		list []string
		host string
		want bool
	}{
		{[]string{"localhost:5000"}, "localhost:5000", true},
		{[]string{"localhost:5000"}, "localhost:5001", false},
		{[]string{"Registry.LAN"}, "registry.lan:443", true},
		{[]string{"[::1]"}, "[::1]:5000", true},
		{nil, "127.0.0.1:5000", false},
		{[]string{"10.0.0.1"}, "10.0.0.10:5000", false},
	} {
		if got := InsecureAllowed(c.list, c.host); got != c.want {
			t.Errorf("InsecureAllowed(%v, %s) = %v, want %v", c.list, c.host, got, c.want)
		}
	}
}
