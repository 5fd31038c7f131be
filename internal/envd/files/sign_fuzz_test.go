package files

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"cube/internal/envd/protocol"
)

// FuzzVerify checks signature verification on arbitrary URL parameters: it
// never panics, admits only the exact signature of the exact parameters
// before their expiry, and always admits a genuine, unexpired signature.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add("v1_x", "", "/home/user/a.txt", "read", "user", "tok", int64(0))
	f.Add(protocol.SignFileURL("a", "write", "root", "tok", 0), "", "a", "write", "root", "tok", int64(0))
	f.Add(protocol.SignFileURL("a", "read", "", "tok", now.Unix()+60), strconv.FormatInt(now.Unix()+60, 10), "a", "read", "", "tok", now.Unix()+60)
	f.Add(protocol.SignFileURL("a", "read", "u", "tok", now.Unix()-1), strconv.FormatInt(now.Unix()-1, 10), "a", "read", "u", "tok", now.Unix()-1)
	f.Add("", "-5", "a:read:b", "read", "c", "tok", int64(-5))
	f.Add("", "99999999999999999999", "", "", "", "", int64(0))
	f.Fuzz(func(t *testing.T, sig, expiration, path, operation, user, token string, expires int64) {
		err := verify(sig, expiration, path, operation, user, token, now)
		if err == nil {
			exp, _ := strconv.ParseInt(expiration, 10, 64)
			if expiration != "" && (exp <= 0 || now.Unix() > exp) {
				t.Fatalf("admitted expiration %q at %d", expiration, now.Unix())
			}
			if sig != protocol.SignFileURL(path, operation, user, token, exp) {
				t.Fatalf("admitted %q, not the signature of its parameters", sig)
			}
			if strings.Contains(user, ":") {
				t.Fatalf("admitted user %q", user)
			}
		}

		// A genuine signature verifies until it expires, and for nothing
		// else.
		if strings.Contains(user, ":") || expires < 0 {
			return
		}
		expStr := ""
		if expires != 0 {
			expStr = strconv.FormatInt(expires, 10)
		}
		good := protocol.SignFileURL(path, operation, user, token, expires)
		err = verify(good, expStr, path, operation, user, token, now)
		expired := expires != 0 && now.Unix() > expires
		switch {
		case expired && err != errExpiredSignature:
			t.Fatalf("expired signature: %v", err)
		case !expired && err != nil:
			t.Fatalf("genuine signature refused: %v", err)
		}
		if verify(good, expStr, path+"x", operation, user, token, now) == nil {
			t.Fatal("signature admitted for another path")
		}
		if verify(good, expStr, path, operation, user+"x", token, now) == nil {
			t.Fatal("signature admitted for another user")
		}
		if verify(good, expStr, path, operation, user, token+"x", now) == nil {
			t.Fatal("signature admitted under another token")
		}
	})
}
