package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// secret is a secret cube-server takes in one of three ways: --<name>-file
// (a file only its owner reads), $<env>, or --<name> itself. The last still
// works but warns: a command line is in ps and /proc/<pid>/cmdline, which
// every user of the machine may read.
type secret struct {
	name, env   string
	value, file string
}

// define adds --<name> and --<name>-file to fs.
func (s *secret) define(fs *flag.FlagSet, usage string) {
	fs.StringVar(&s.value, s.name, "", fmt.Sprintf("%s (default $%s); on the command line other users see it in ps: prefer --%s-file or $%s", usage, s.env, s.name, s.env))
	fs.StringVar(&s.file, s.name+"-file", "", fmt.Sprintf("file holding --%s (a trailing newline is ignored); keep it mode 0600", s.name))
}

// resolve returns the secret from the file, the command line or the
// environment, after fs is parsed; warn receives what the operator should
// change.
func (s *secret) resolve(fs *flag.FlagSet, warn func(string)) (string, error) {
	onCommandLine := false
	fs.Visit(func(f *flag.Flag) { onCommandLine = onCommandLine || f.Name == s.name })
	switch {
	case onCommandLine && s.file != "":
		return "", fmt.Errorf("--%s and --%s-file: give one", s.name, s.name)
	case s.file != "":
		return s.readFile(warn)
	case onCommandLine:
		warn(fmt.Sprintf("--%s on the command line is visible to every user of this machine (ps, /proc/<pid>/cmdline): use --%s-file or $%s instead", s.name, s.name, s.env))
		return s.value, nil
	}
	return os.Getenv(s.env), nil
}

func (s *secret) readFile(warn func(string)) (string, error) {
	b, err := os.ReadFile(s.file)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", s.name, err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("--%s-file: %s is empty", s.name, s.file)
	}
	if fi, err := os.Stat(s.file); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warn(fmt.Sprintf("--%s-file: %s is readable by other users (mode %04o): chmod 600 it", s.name, s.file, fi.Mode().Perm()))
	}
	return v, nil
}
