// Package id makes the identifiers Cube hands out. Sandbox IDs become DNS
// labels (<port>-<id>.<domain>), so they are lowercase alphanumeric only.
package id

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
)

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// New returns a random lowercase alphanumeric identifier of n characters,
// optionally after a prefix such as "snap-".
func New(prefix string, n int) string {
	b := make([]byte, n)
	// Rejection sampling keeps every character equally likely.
	buf := make([]byte, 2*n)
	i := 0
	for i < n {
		rand.Read(buf)
		for _, c := range buf {
			if c >= 252 { // 252 = 7*36, the largest multiple of 36 below 256
				continue
			}
			b[i] = alphabet[int(c)%len(alphabet)]
			i++
			if i == n {
				break
			}
		}
	}
	return prefix + string(b)
}

// Sandbox returns a new sandbox ID.
func Sandbox() string { return New("", 20) }

// Token returns n random bytes as hex: access tokens and API keys.
func Token(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

var sandboxRE = regexp.MustCompile(`^[a-z0-9]{1,63}$`)

// ValidSandbox reports whether s can be a sandbox ID (a DNS label of
// lowercase letters and digits).
func ValidSandbox(s string) bool { return sandboxRE.MatchString(s) }

// ValidName reports whether s is safe to use as a single path element and
// a template or snapshot identifier: lowercase letters, digits, '-' and '_'.
func ValidName(s string) bool { return nameRE.MatchString(s) }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
