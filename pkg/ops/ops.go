// Package ops serves what an operator's tools ask every e31 process over
// HTTP: /metrics (Prometheus' text exposition), /healthz (the process is
// alive) and /readyz (it is connected and caught up, or why not, in plain
// text).
//
// Nothing is served beyond loopback unless the operator asks, and then only
// to whoever shows the bearer token the process was given: the figures name
// every submitter and node, which a stranger on the network has no business
// reading. The token guards every path, probes included, so that no path is
// forgotten; Prometheus (bearer_token_file) and Kubernetes probes (httpHeaders)
// both send one. The one exception is the operator's page (Config.Page),
// which a browser shows: a browser sends no bearer header, so the page
// authenticates its viewers itself (pkg/web), with the same token.
package ops

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultDevAddr is where `e31 dev` serves unless told otherwise.
const DefaultDevAddr = "127.0.0.1:8031"

// ErrTokenRequired is returned for a server bound beyond loopback without a
// token.
var ErrTokenRequired = errors.New("ops: an address beyond loopback needs a bearer token (--http-token-file)")

// Check says whether one part of the process is ready: nil, or why not. It
// is called on every request to /readyz, concurrently with everything else,
// and must not wait long: ctx ends after a few seconds.
type Check func(ctx context.Context) error

// Config says what to serve and where.
type Config struct {
	// Addr is host:port to listen on; port 0 picks a free one.
	Addr string
	// Token, when set, must be shown as "Authorization: Bearer TOKEN" on
	// every request. Required unless Addr is a loopback address.
	Token string
	// Gatherer is what /metrics exposes.
	Gatherer prometheus.Gatherer
	// Ready are the checks of /readyz, by name, all of which must pass.
	Ready map[string]Check
	// Page, when set, serves every path but those above: the operator's
	// page (pkg/web). The bearer token does not guard it: it logs its
	// viewers in itself, and must be given Token to do so.
	Page http.Handler
	// Logger reports what the server could not do.
	Logger *slog.Logger
}

// Server serves the operator's endpoints on a listening socket.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	log  *slog.Logger
	addr string
}

// Listen checks cfg and binds its address at once, so that a port in use or
// a missing token is said at start rather than in a log line later.
func Listen(cfg Config) (*Server, error) {
	loopback, err := IsLoopback(cfg.Addr)
	if err != nil {
		return nil, err
	}
	if !loopback && cfg.Token == "" {
		return nil, fmt.Errorf("%w: %s is reachable from other machines", ErrTokenRequired, cfg.Addr)
	}
	log := orDefault(cfg.Logger)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("ops: listen: %w", err)
	}
	s := &Server{ln: ln, log: log, addr: ln.Addr().String()}
	s.srv = &http.Server{
		Handler:           Handler(cfg),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Addr is the address the server listens on, with the port it picked.
func (s *Server) Addr() string { return s.addr }

// Serve serves until ctx ends, then shuts down, letting requests under way
// finish for a few seconds.
func (s *Server) Serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("ops: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	// Serve returns ErrServerClosed once Shutdown began: the one answer
	// expected here, and nothing to report.
	if serr := <-done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("ops: shut down: %w", err)
	}
	return nil
}

// Close stops a server that was never served.
func (s *Server) Close() error { return s.ln.Close() }

// Handler serves /metrics, /healthz and /readyz for cfg (its Addr aside),
// and cfg.Page at every other path.
func Handler(cfg Config) http.Handler {
	guarded := endpoints(cfg)
	if cfg.Page == nil {
		return guarded
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics", "/healthz", "/readyz":
			guarded.ServeHTTP(w, r)
		default:
			cfg.Page.ServeHTTP(w, r)
		}
	})
}

// endpoints serves /metrics, /healthz and /readyz, behind the token.
func endpoints(cfg Config) http.Handler {
	gatherer := cfg.Gatherer
	if gatherer == nil {
		gatherer = prometheus.NewRegistry()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(orDefault(cfg.Logger).Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		plain(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		var why []string
		// Sorted, so that the reasons read the same on every request.
		for _, name := range slices.Sorted(maps.Keys(cfg.Ready)) {
			if err := cfg.Ready[name](ctx); err != nil {
				why = append(why, name+": "+err.Error())
			}
		}
		if len(why) > 0 {
			plain(w, http.StatusServiceUnavailable, "not ready\n"+strings.Join(why, "\n"))
			return
		}
		plain(w, http.StatusOK, "ready")
	})
	if cfg.Token == "" {
		return mux
	}
	want := []byte("Bearer " + cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="e31"`)
			plain(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer with the token of --http-token-file")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func plain(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}

func orDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// IsLoopback reports whether addr (host:port) can be reached from this
// machine only: a loopback IP or "localhost". An empty host listens on
// every interface, so it is not.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("ops: address %q: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// ReadToken reads a bearer token from file: its first line, which must not
// be empty. Only its owner should be able to read the file.
func ReadToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("ops: token: %w", err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("ops: token: %s is empty", file)
	}
	return tok, nil
}
