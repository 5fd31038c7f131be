package files

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sign returns the signature that lets a URL read or write path as user
// without the access token, as the SDKs compute it: "v1_" and the unpadded
// base64 of sha256("<path>:<operation>:<user>:<token>[:<expires>]").
// expires is a Unix time in seconds; 0 means the signature never expires.
func Sign(path, operation, user, token string, expires int64) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expires != 0 {
		raw += ":" + strconv.FormatInt(expires, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// The messages are E2B's, which SDKs and their users recognise.
var (
	errBadSignature     = errors.New("invalid signature")
	errExpiredSignature = errors.New("signature is already expired")
)

// verify checks a signature taken from a URL: first that it was made with
// token for exactly this path, operation, user and expiry, then that the
// expiry, when there is one, has not passed.
func verify(sig, expiration, path, operation, user, token string, now time.Time) error {
	var expires int64
	if expiration != "" {
		var err error
		expires, err = strconv.ParseInt(expiration, 10, 64)
		if err != nil || expires <= 0 {
			return fmt.Errorf("invalid signature_expiration %q: want the Unix time in seconds the URL expires at", expiration)
		}
	}
	// The fields are joined with ':', so a user name holding one could
	// shift the boundary between path and user; no account can have such
	// a name anyway.
	if strings.Contains(user, ":") {
		return errBadSignature
	}
	want := Sign(path, operation, user, token, expires)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errBadSignature
	}
	if expires != 0 && now.Unix() > expires {
		return errExpiredSignature
	}
	return nil
}
