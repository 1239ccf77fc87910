package ops_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/e31net/e31/pkg/ops"
)

// serve starts a server for cfg on a free loopback port, for the test.
func serve(t *testing.T, cfg ops.Config) string {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	s, err := ops.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + s.Addr()
}

// get returns the status and body of a GET, with the token if one is given.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "e31_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	var caughtUp atomic.Bool
	url := serve(t, ops.Config{Gatherer: reg, Ready: map[string]ops.Check{
		"log": func(context.Context) error {
			if !caughtUp.Load() {
				return errors.New("replaying the log: at #3 of #10")
			}
			return nil
		},
		"nats": func(context.Context) error { return nil },
	}})

	if code, body := get(t, url+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, url+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "e31_test_total 3") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	code, body := get(t, url+"/readyz", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "log: replaying the log: at #3 of #10") {
		t.Errorf("/readyz while not ready: %d %q; want 503 and the reason", code, body)
	}
	if strings.Contains(body, "nats") {
		t.Errorf("/readyz names a check that passed: %q", body)
	}
	caughtUp.Store(true)
	if code, body := get(t, url+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz when ready: %d %q", code, body)
	}
}

func TestBeyondLoopbackNeedsAToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0"} {
		if _, err := ops.Listen(ops.Config{Addr: addr}); !errors.Is(err, ops.ErrTokenRequired) {
			t.Errorf("Listen(%s) without a token: %v, want ErrTokenRequired", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "127.0.0.2:0"} {
		loop, err := ops.IsLoopback(addr)
		if err != nil || !loop {
			t.Errorf("IsLoopback(%s) = %v, %v", addr, loop, err)
		}
	}
}

func TestTheTokenGuardsEveryPath(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := ops.ReadToken(file)
	if err != nil || token != "s3cret" {
		t.Fatalf("ReadToken: %q, %v", token, err)
	}
	url := serve(t, ops.Config{Addr: "127.0.0.1:0", Token: token})
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := get(t, url+path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", path, code)
		}
		if code, _ := get(t, url+path, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
		if code, body := get(t, url+path, token); code != http.StatusOK {
			t.Errorf("%s with the token: %d %s", path, code, body)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.ReadToken(empty); err == nil {
		t.Error("an empty token file was accepted")
	}
}

// TestThePageLogsInItsOwnViewers: the page (Config.Page) gets every path but
// the probes and /metrics, without the bearer check, which a browser could
// not pass; the probes and /metrics keep theirs.
func TestThePageLogsInItsOwnViewers(t *testing.T) {
	t.Parallel()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	})
	url := serve(t, ops.Config{Addr: "127.0.0.1:0", Token: "s3cret", Page: page})
	for _, path := range []string{"/", "/job/x", "/login"} {
		if code, body := get(t, url+path, ""); code != http.StatusOK || body != "page "+path {
			t.Errorf("%s: %d %q, want the page's", path, code, body)
		}
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := get(t, url+path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token beside a page: %d, want 401", path, code)
		}
	}
}
