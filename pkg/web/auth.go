package web

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
)

// cookieName holds a logged-in viewer's token.
const cookieName = "e31_token"

// viewer is who looks at the page.
type viewer struct {
	// Name is a submitter's name, "operator" or "auditor".
	Name string
	// Open says nobody logged in: the page needs no login (loopback, no
	// token), and whoever reaches it sees what the operator sees.
	Open bool
}

// All reports whether the viewer sees every submitter's jobs.
func (v viewer) All() bool { return v.Open || auth.SeesAll(v.Name) }

// Operator reports whether the viewer may act as the operator or auditor
// (run the audit, see the pool's leases).
func (v viewer) Operator() bool { return v.All() }

// sees reports whether the viewer may see a job of submitter.
func (v viewer) sees(submitter string) bool { return v.All() || v.Name == submitter }

// closed reports whether the page asks viewers to log in.
func (p *Page) closed() bool { return p.cfg.Token != "" || len(p.cfg.Viewers) > 0 }

// who is the viewer a token names, or false.
func (p *Page) who(token string) (viewer, bool) {
	if token == "" {
		return viewer{}, false
	}
	// Every token is compared, in constant time, so that the time taken
	// says nothing about which came close.
	found := viewer{}
	ok := false
	if p.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(p.cfg.Token)) == 1 {
		found, ok = viewer{Name: events.Operator}, true
	}
	for tok, name := range p.cfg.Viewers {
		if subtle.ConstantTimeCompare([]byte(token), []byte(tok)) == 1 && !ok {
			found, ok = viewer{Name: name}, true
		}
	}
	return found, ok
}

// viewerOf is who asks r: from its cookie or its bearer token when the page
// is closed; when it is open, anyone who reached it by a loopback name
// (which a page elsewhere cannot make a browser use: DNS rebinding).
func (p *Page) viewerOf(r *http.Request) (viewer, bool) {
	if !p.closed() {
		return viewer{Name: events.Operator, Open: true}, loopbackHost(r.Host)
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return p.who(tok)
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return p.who(c.Value)
	}
	return viewer{}, false
}

// loopbackHost reports whether a Host header names this machine only.
func loopbackHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether a request that changes something comes from
// the page itself: a browser sends Origin on every POST, and a form on
// another site cannot make it say this host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		// Not a browser (curl with a bearer token): nothing to forge.
		return r.Header.Get("Authorization") != ""
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// login checks the token of the login form and sets the cookie.
func (p *Page) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "forbidden: the login form is this page's own", http.StatusForbidden)
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if _, ok := p.who(tok); !ok {
		p.render(w, r, http.StatusUnauthorized, "login", viewer{}, loginData{Failed: true})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout forgets the cookie.
func (p *Page) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// loginData is what the login form shows.
type loginData struct{ Failed bool }
