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

var errBadSignature = errors.New("invalid signature")

// verify checks a signature taken from a URL.
func verify(sig, expiration, path, operation, user, token string, now time.Time) error {
	var expires int64
	if expiration != "" {
		var err error
		expires, err = strconv.ParseInt(expiration, 10, 64)
		if err != nil || expires <= 0 {
			return fmt.Errorf("invalid signature_expiration %q", expiration)
		}
	}
	want := Sign(path, operation, user, token, expires)
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errBadSignature
	}
	if expires != 0 && now.Unix() > expires {
		return errors.New("signature expired")
	}
	return nil
}
