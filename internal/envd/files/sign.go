package files

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cube/internal/envd/protocol"
)

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
	want := protocol.SignFileURL(path, operation, user, token, expires)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errBadSignature
	}
	if expires != 0 && now.Unix() > expires {
		return errExpiredSignature
	}
	return nil
}
