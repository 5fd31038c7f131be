package jupyter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Spec is an installed kernelspec: a directory holding kernel.json.
type Spec struct {
	Name          string   // directory name, e.g. "python3"
	Dir           string   // the kernelspec directory ({resource_dir})
	Argv          []string // command line; contains {connection_file}
	DisplayName   string
	Language      string            // e.g. "python"
	Env           map[string]string // extra environment for the kernel process
	InterruptMode string            // "signal" (default) or "message"
}

// DefaultSpecDirs are the standard Jupyter data paths, most specific last so
// that a user's own kernels override the system ones of the same name.
func DefaultSpecDirs() []string {
	dirs := []string{"/usr/share/jupyter/kernels", "/usr/local/share/jupyter/kernels"}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".local/share/jupyter/kernels"))
	}
	return dirs
}

type kernelJSON struct {
	Argv          []string `json:"argv"`
	DisplayName   string
	Language      string            `json:"language"`
	Env           map[string]string `json:"env"`
	InterruptMode string            `json:"interrupt_mode"`
}

// ReadSpec reads the kernelspec in dir.
func ReadSpec(dir string) (Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		return Spec{}, err
	}
	var k kernelJSON
	if err := json.Unmarshal(data, &k); err != nil {
		return Spec{}, fmt.Errorf("kernelspec %s: %w", dir, err)
	}
	if len(k.Argv) == 0 {
		return Spec{}, fmt.Errorf("kernelspec %s: empty argv", dir)
	}
	mode := k.InterruptMode
	if mode == "" {
		mode = "signal"
	}
	return Spec{
		Name:          filepath.Base(dir),
		Dir:           dir,
		Argv:          k.Argv,
		DisplayName:   k.DisplayName,
		Language:      strings.ToLower(k.Language),
		Env:           k.Env,
		InterruptMode: mode,
	}, nil
}

// FindSpecs lists the kernelspecs installed under dirs. A later directory's
// spec replaces an earlier one of the same name. Unreadable or malformed
// specs are returned as errors next to the good ones, so one broken kernel
// does not hide the others.
func FindSpecs(dirs []string) ([]Spec, []error) {
	byName := map[string]Spec{}
	var errs []error
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range entries {
			if !e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			s, err := ReadSpec(filepath.Join(d, e.Name()))
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
				continue
			}
			byName[s.Name] = s
		}
	}
	specs := make([]Spec, 0, len(byName))
	for _, s := range byName {
		specs = append(specs, s)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	return specs, errs
}

// SpecFor picks the kernelspec for a language: a spec whose name equals the
// language wins, then "python3" for python, then the first spec (by name)
// that declares the language.
func SpecFor(specs []Spec, language string) (Spec, bool) {
	language = strings.ToLower(language)
	for _, s := range specs {
		if s.Name == language {
			return s, true
		}
	}
	if language == "python" {
		for _, s := range specs {
			if s.Name == "python3" {
				return s, true
			}
		}
	}
	for _, s := range specs {
		if s.Language == language {
			return s, true
		}
	}
	return Spec{}, false
}
