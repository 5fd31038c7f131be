package protocol

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// SignFileURL returns the signature that lets a file URL read or write
// path as user without the access token, as the SDKs compute it: "v1_" and
// the unpadded base64 of sha256("<path>:<operation>:<user>:<token>[:<expires>]").
// operation is "read" or "write"; expires is a Unix time in seconds, 0 for
// a signature that never expires. envd checks it; the control plane uses it
// to tell which sandbox a signed URL that names none was made for.
func SignFileURL(path, operation, user, token string, expires int64) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expires != 0 {
		raw += ":" + strconv.FormatInt(expires, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}
