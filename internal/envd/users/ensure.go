package users

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ensure makes sure the account name exists in the passwd database under
// root (normally "/"), with a home directory home owned by it, and reports
// whether it had to create it. Images built from arbitrary OCI images often
// lack the "user" account E2B clients expect, and may lack useradd too, so
// the databases are edited directly: one line each in etc/passwd, etc/group
// and, when present, etc/shadow, with the lowest free id from 1000 up.
func Ensure(root, name, home string) (bool, error) {
	passwdPath := filepath.Join(root, "etc", "passwd")
	passwd, err := os.ReadFile(passwdPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if _, ok := field(passwd, name); ok {
		return false, nil
	}
	groupPath := filepath.Join(root, "etc", "group")
	group, err := os.ReadFile(groupPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	id := freeID(passwd, group)
	ids := strconv.Itoa(id)
	if err := appendLine(passwdPath, passwd, fmt.Sprintf("%s:x:%s:%s::%s:/bin/bash", name, ids, ids, home)); err != nil {
		return false, err
	}
	if _, ok := field(group, name); !ok {
		if err := appendLine(groupPath, group, fmt.Sprintf("%s:x:%s:", name, ids)); err != nil {
			return false, err
		}
	}
	shadowPath := filepath.Join(root, "etc", "shadow")
	if shadow, err := os.ReadFile(shadowPath); err == nil {
		if _, ok := field(shadow, name); !ok {
			if err := appendLine(shadowPath, shadow, name+":*:19000:0:99999:7:::"); err != nil {
				return false, err
			}
		}
	}
	dir := filepath.Join(root, home)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return true, err
	}
	if err := os.Chown(dir, id, id); err != nil && os.Geteuid() == 0 {
		return true, err
	}
	return true, nil
}

// field returns the line of a colon-separated database whose first field is
// name.
func field(db []byte, name string) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(db))
	for sc.Scan() {
		line := sc.Text()
		if first, _, ok := strings.Cut(line, ":"); ok && first == name {
			return line, true
		}
	}
	return "", false
}

// freeID is the lowest id from 1000 used neither as a uid nor as a gid.
func freeID(passwd, group []byte) int {
	used := map[int]bool{}
	collect := func(db []byte, col int) {
		sc := bufio.NewScanner(bytes.NewReader(db))
		for sc.Scan() {
			parts := strings.Split(sc.Text(), ":")
			if len(parts) > col {
				if n, err := strconv.Atoi(parts[col]); err == nil {
					used[n] = true
				}
			}
		}
	}
	collect(passwd, 2)
	collect(group, 2)
	id := 1000
	for used[id] {
		id++
	}
	return id
}

func appendLine(path string, old []byte, line string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var prefix string
	if len(old) > 0 && old[len(old)-1] != '\n' {
		prefix = "\n"
	}
	perm := fs.FileMode(0o644)
	if filepath.Base(path) == "shadow" {
		perm = 0o640
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, perm)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(prefix + line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
