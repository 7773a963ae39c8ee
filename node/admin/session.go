package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sessionCookie names the cookie POST /admin/v1/session sets: what a
// browser presents for the reads (EventSource cannot send a header).
const sessionCookie = "shoal_admin_session"

// sessionLength is how long a session cookie is valid.
const sessionLength = 12 * time.Hour

// sessionValue is "expiry.mac": the expiry in Unix seconds and an HMAC of
// it keyed with the token. It holds no state on the node, does not reveal
// the token, and every session ends when the token changes.
func sessionValue(token string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + sessionMAC(token, exp)
}

func sessionMAC(token, exp string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("shoal-admin-session|" + exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validSession reports whether value is a session of token unexpired at now.
func validSession(token, value string, now time.Time) bool {
	exp, mac, ok := strings.Cut(value, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !now.Before(time.Unix(unix, 0)) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(mac), []byte(sessionMAC(token, exp))) == 1
}

// login serves POST /admin/v1/session: given the token (JSON body
// {"token": "..."}), it sets the session cookie, HttpOnly and
// SameSite=Strict (Secure over TLS), with no Path: the browser scopes it
// to the directory of this URL, .../admin/v1, which holds every read
// however a proxy prefixes the API. The cookie opens
// the reads only: actions still need the Authorization header, so a page
// of another site can make the browser do nothing with it.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	var req LoginRequest
	if err := decode(r, w, &req, false); err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Token == "" {
		h.fail(w, r, fmt.Errorf("%w: a token is required", ErrBadRequest))
		return
	}
	if h.opts.Token == "" || subtle.ConstantTimeCompare([]byte(req.Token), []byte(h.opts.Token)) != 1 {
		h.log.Warn("admin: login refused", "client", r.RemoteAddr, "status", http.StatusForbidden)
		writeError(w, http.StatusForbidden, CodeForbidden, errors.New("admin: wrong token"))
		return
	}
	expires := time.Now().Add(sessionLength)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: sessionValue(h.opts.Token, expires),
		Expires: expires, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	h.log.Info("admin: session opened", "client", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
}

// logout serves DELETE /admin/v1/session: the browser drops the cookie.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}
