package oci

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ImageConfig is the part of an image's configuration a sandbox honours.
type ImageConfig struct {
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE
	WorkingDir string
	User       string
	// ExposedPorts are the image's EXPOSE ports, sorted, protocol dropped.
	ExposedPorts []int
}

// ConfigOf reads the run configuration of img.
func ConfigOf(img v1.Image) (ImageConfig, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return ImageConfig{}, fmt.Errorf("reading image config: %w", err)
	}
	return imageConfig(cf), nil
}

func imageConfig(cf *v1.ConfigFile) ImageConfig {
	c := cf.Config
	ic := ImageConfig{
		Entrypoint: slices.Clone(c.Entrypoint),
		Cmd:        slices.Clone(c.Cmd),
		Env:        slices.Clone(c.Env),
		WorkingDir: c.WorkingDir,
		User:       c.User,
	}
	for p := range c.ExposedPorts {
		num, _, _ := strings.Cut(p, "/")
		n, err := strconv.Atoi(num)
		if err != nil || n <= 0 || n > 65535 || slices.Contains(ic.ExposedPorts, n) {
			continue
		}
		ic.ExposedPorts = append(ic.ExposedPorts, n)
	}
	slices.Sort(ic.ExposedPorts)
	return ic
}
