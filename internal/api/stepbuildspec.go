package api

import (
	"fmt"
	"regexp"
	"strings"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/id"
)

// buildIntent validates the body of POST /v3/templates.
func buildIntent(body wire.TemplateBuildRequestV3) (cube.BuildIntent, error) {
	intent := cube.BuildIntent{Name: body.Name, CPUCount: body.CPUCount, MemoryMB: body.MemoryMB}
	if intent.Name == "" {
		intent.Name = body.Alias
	}
	if intent.Name == "" {
		return intent, badRequest("name is required")
	}
	if err := validTemplateRef("name", intent.Name); err != nil {
		return intent, err
	}
	if len(body.Tags) > MaxAliases {
		return intent, badRequest("at most %d tags, got %d", MaxAliases, len(body.Tags))
	}
	for _, tag := range body.Tags {
		if err := validTag(tag); err != nil {
			return intent, err
		}
	}
	intent.Tags = body.Tags
	if intent.CPUCount < 0 || intent.CPUCount > MaxCPUCount {
		return intent, badRequest("cpuCount must be between 1 and %d, got %d", MaxCPUCount, intent.CPUCount)
	}
	if intent.MemoryMB < 0 || intent.MemoryMB > MaxMemoryMB {
		return intent, badRequest("memoryMB must be between 1 and %d, got %d", MaxMemoryMB, intent.MemoryMB)
	}
	return intent, nil
}

// validTemplateRef checks a "name" or "name:tag" reference.
func validTemplateRef(field, ref string) error {
	name, tag, tagged := strings.Cut(ref, ":")
	if !id.ValidName(name) {
		return badRequest("invalid %s %q: want 1-63 lowercase letters, digits, '-' and '_', starting with a letter or digit, optionally followed by :tag", field, ref)
	}
	if tagged {
		return validTag(tag)
	}
	return nil
}

func validTag(tag string) error {
	if !tagPattern.MatchString(tag) {
		return badRequest("invalid tag %q: want 1-63 lowercase letters, digits, '.', '-' and '_', starting with a letter or digit", tag)
	}
	return nil
}

// tagPattern is what a tag may be: versions such as v1.0 included.
var tagPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// buildSpec validates the body of a build start.
func buildSpec(body wire.TemplateBuildStartV2) (cube.BuildSpec, error) {
	spec := cube.BuildSpec{
		FromImage: strings.TrimSpace(body.FromImage), FromTemplate: strings.TrimSpace(body.FromTemplate),
		StartCmd: body.StartCmd, ReadyCmd: body.ReadyCmd, Force: body.Force,
	}
	if (spec.FromImage == "") == (spec.FromTemplate == "") {
		return spec, badRequest("exactly one of fromImage and fromTemplate is required")
	}
	if spec.FromImage != "" && (len(spec.FromImage) > 4096 || strings.ContainsAny(spec.FromImage, "\x00\n\r")) {
		return spec, badRequest("invalid fromImage %q", spec.FromImage)
	}
	if spec.FromTemplate != "" {
		if err := validTemplateRef("fromTemplate", spec.FromTemplate); err != nil {
			return spec, err
		}
	}
	if err := registryAuth(body.FromImageRegistry, &spec); err != nil {
		return spec, err
	}
	if err := buildString("startCmd", spec.StartCmd); err != nil {
		return spec, err
	}
	if err := buildString("readyCmd", spec.ReadyCmd); err != nil {
		return spec, err
	}
	if len(body.Steps) > MaxBuildSteps {
		return spec, badRequest("at most %d steps, got %d", MaxBuildSteps, len(body.Steps))
	}
	for i, st := range body.Steps {
		step, err := buildStep(i, st)
		if err != nil {
			return spec, err
		}
		spec.Steps = append(spec.Steps, step)
	}
	return spec, nil
}

// registryAuth fills the spec's registry credentials. Only a general
// registry's username and password can be served: ECR and Artifact
// Registry need their clouds' token exchanges.
func registryAuth(reg *wire.FromImageRegistry, spec *cube.BuildSpec) error {
	if reg == nil {
		return nil
	}
	switch reg.Type {
	case "registry":
		if spec.FromImage == "" {
			return badRequest("fromImageRegistry applies to fromImage only")
		}
		spec.RegistryUsername, spec.RegistryPassword = reg.Username, reg.Password
		return nil
	case "aws", "gcp":
		return badRequest("fromImageRegistry type %q is not supported: only general registries (type \"registry\", username and password) are", reg.Type)
	}
	return badRequest("fromImageRegistry type %q: want \"registry\"", reg.Type)
}

// stepArgs bounds the argument count of each step type.
var stepArgs = map[string]struct{ min, max int }{
	cube.StepRun:     {1, 2},
	cube.StepCopy:    {2, 4},
	cube.StepEnv:     {2, maxStepArgs},
	cube.StepWorkdir: {1, 1},
	cube.StepUser:    {1, 1},
}

// buildStep validates step i (0-based; messages name it 1-based, as the
// build's log does).
func buildStep(i int, st wire.TemplateStep) (cube.BuildStep, error) {
	step := cube.BuildStep{Type: st.Type, Args: st.Args, FilesHash: st.FilesHash, Force: st.Force}
	n := i + 1
	bounds, ok := stepArgs[st.Type]
	if !ok {
		return step, badRequest("step %d: type %q: want RUN, COPY, ENV, WORKDIR or USER", n, st.Type)
	}
	if len(st.Args) < bounds.min || len(st.Args) > bounds.max {
		return step, badRequest("step %d: %s takes %s, got %d", n, st.Type, argCount(bounds.min, bounds.max), len(st.Args))
	}
	if st.Type == cube.StepEnv && len(st.Args)%2 != 0 {
		return step, badRequest("step %d: ENV takes name-value pairs, got %d arguments", n, len(st.Args))
	}
	for _, a := range st.Args {
		if err := buildString(fmt.Sprintf("step %d: argument", n), a); err != nil {
			return step, err
		}
	}
	switch {
	case st.Type == cube.StepCopy && !validHash(st.FilesHash):
		return step, badRequest("step %d: COPY needs filesHash, 64 lowercase hex digits, got %q", n, st.FilesHash)
	case st.Type != cube.StepCopy && st.FilesHash != "":
		return step, badRequest("step %d: filesHash belongs to COPY steps only", n)
	}
	return step, nil
}

func argCount(min, max int) string {
	switch {
	case min == max:
		return fmt.Sprintf("exactly %d argument(s)", min)
	case max == maxStepArgs:
		return fmt.Sprintf("at least %d arguments", min)
	}
	return fmt.Sprintf("%d to %d arguments", min, max)
}

func buildString(field, v string) error {
	if len(v) > maxBuildString {
		return badRequest("%s is longer than %d bytes", field, maxBuildString)
	}
	if strings.ContainsRune(v, 0) {
		return badRequest("%s may not contain NUL bytes", field)
	}
	return nil
}
