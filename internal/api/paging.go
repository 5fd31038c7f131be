package api

import (
	"cube/internal/cube"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// page sorts items by (time, id) and cuts the page after the cursor token.
// The cursor is the key of the last item answered, so items created or
// removed between two calls never shift a page: every surviving item is
// seen exactly once. next is "" on the last page.
func page[T any](items []T, key func(*T) (time.Time, string), asc bool, limit int, token string) (out []T, next string, err error) {
	// order compares two keys in the page's direction; sorting and finding
	// the cursor must agree on it, or a page would skip or repeat items.
	order := func(ta time.Time, ia string, tb time.Time, ib string) int {
		c := ta.Compare(tb)
		if c == 0 {
			c = strings.Compare(ia, ib)
		}
		if !asc {
			c = -c
		}
		return c
	}
	slices.SortFunc(items, func(a, b T) int {
		ta, ia := key(&a)
		tb, ib := key(&b)
		return order(ta, ia, tb, ib)
	})
	start := 0
	if token != "" {
		ct, cid, err := decodeCursor(token)
		if err != nil {
			return nil, "", err
		}
		start = len(items)
		for i := range items {
			t, id := key(&items[i])
			if order(t, id, ct, cid) > 0 {
				start = i
				break
			}
		}
	}
	end := min(start+limit, len(items))
	out = items[start:end]
	if end < len(items) && len(out) > 0 {
		t, id := key(&out[len(out)-1])
		next = encodeCursor(t, id)
	}
	return out, next, nil
}

func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixNano(), 10) + "." + id))
}

func decodeCursor(token string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return time.Time{}, "", badRequest("invalid nextToken %q", token)
	}
	ns, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return time.Time{}, "", badRequest("invalid nextToken %q", token)
	}
	return time.Unix(0, n), id, nil
}

// pageParams reads limit and nextToken.
func pageParams(r *http.Request) (limit int, token string, err error) {
	l, err := queryInt(r, "limit", MaxListLimit, 1, MaxListLimit)
	if err != nil {
		return 0, "", err
	}
	return int(l), r.URL.Query().Get("nextToken"), nil
}

// pageAt is the page a backend reads: limit items after the cursor that
// token names (none: from the start).
func pageAt(limit int, token string) (cube.Page, error) {
	p := cube.Page{Limit: limit}
	if token != "" {
		t, id, err := decodeCursor(token)
		if err != nil {
			return cube.Page{}, err
		}
		p.After = &cube.Cursor{Time: t, ID: id}
	}
	return p, nil
}

// setNextTokenAt sets X-Next-Token to a backend's cursor of the next page
// (none after the last).
func setNextTokenAt(w http.ResponseWriter, next *cube.Cursor) {
	if next != nil {
		setNextToken(w, encodeCursor(next.Time, next.ID))
	}
}

// setNextToken sets X-Next-Token; an empty token (last page) sends none, as
// the SDKs treat an empty or absent header alike.
func setNextToken(w http.ResponseWriter, next string) {
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
}
