package volume

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "data", "My_Volume-2", strings.Repeat("x", 63)} {
		if !ValidName(ok) {
			t.Errorf("ValidName(%q) = false, want true", ok)
		}
	}
	for _, bad := range []string{"", "has space", "a/b", "..", ".", "é", "a\x00", strings.Repeat("x", 64)} {
		if ValidName(bad) {
			t.Errorf("ValidName(%q) = true, want false", bad)
		}
	}
}

func TestValidID(t *testing.T) {
	if id := NewID(); !ValidID(id) {
		t.Errorf("NewID() = %q, which ValidID refuses", id)
	}
	for _, bad := range []string{"", "vol-", "vol-../../etc", "vol-ABCDEFGHIJKLMNOPQRST", "x-aaaaaaaaaaaaaaaaaaaa"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestCheckMountPath(t *testing.T) {
	for _, ok := range []string{"/mnt/data", "/data", "/home/user/work", "/opt/x", "/tmp/x", "/usr/local/share/v", "/workspace"} {
		if err := CheckMountPath(ok); err != nil {
			t.Errorf("CheckMountPath(%q) = %v, want nil", ok, err)
		}
	}
	refused := map[string]string{
		"":            "empty",
		"relative":    "not absolute",
		"/mnt/../etc": "not clean",
		"/mnt/data/":  "not clean",
		"//mnt":       "not clean",
		"/":           "would hide",
		"/tmp":        "would hide",
		"/etc":        "would hide",
		"/home/user":  "would hide",
		"/usr":        "would hide",
		"/proc":       "would hide",
		"/proc/self":  "inside /proc",
		"/sys/fs":     "inside /sys",
		"/dev/shm":    "inside /dev",
		"/.cube":      "would hide",
		"/.cube/envd": "inside /.cube",
		"/mnt/a,b":    "character",
		"/mnt/a:b":    "character",
		"/mnt/\x00":   "character",
	}
	for p, want := range refused {
		err := CheckMountPath(p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckMountPath(%q) = %v, want an error saying %q", p, err, want)
		}
	}
}

func TestCheckOverlap(t *testing.T) {
	for _, c := range [][2]string{{"/mnt/a", "/mnt/a"}, {"/mnt/a", "/mnt/a/b"}, {"/mnt/a/b", "/mnt/a"}} {
		if CheckOverlap(c[0], c[1]) == nil {
			t.Errorf("CheckOverlap(%q, %q) = nil, want an overlap", c[0], c[1])
		}
	}
	for _, c := range [][2]string{{"/mnt/a", "/mnt/ab"}, {"/mnt/a", "/mnt/b"}, {"/data", "/mnt/data"}} {
		if err := CheckOverlap(c[0], c[1]); err != nil {
			t.Errorf("CheckOverlap(%q, %q) = %v, want nil", c[0], c[1], err)
		}
	}
}
