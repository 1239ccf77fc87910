package stack

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/run"
)

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
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

// TestAServiceAloneServesItsEndpoints: web serves the page at / once its
// (pageless) service runs, another service serves no page, and with no
// address nothing is served.
func TestAServiceAloneServesItsEndpoints(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	log := slog.New(slog.DiscardHandler)
	for name, wantPage := range map[string]bool{"web": true, "rent": false} {
		ends, stop, err := StartEndpoints(ctx, AloneConfig{Name: name, NC: js.Conn(), JS: js, Addr: "127.0.0.1:0", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		if name == "web" {
			ends.Serving(PageOnly{})
			// The page is ready once it has read the log to its end, a
			// level it announces nowhere but on /readyz: asked with a
			// deadline.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				code, body := get(t, "http://"+ends.Addr()+"/readyz")
				if code == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("web: /readyz %d %s", code, body)
				}
			}
		}
		code, body := get(t, "http://"+ends.Addr()+"/")
		if got := code == http.StatusOK && strings.Contains(body, `id="jobs"`); got != wantPage {
			t.Errorf("%s: GET / %d, page served %v, want %v", name, code, got, wantPage)
		}
	}
	ends, stop, err := StartEndpoints(ctx, AloneConfig{Name: "rent", NC: js.Conn(), JS: js, Logger: log})
	if ends != nil || err != nil {
		t.Errorf("no address: %v, %v; want nothing served", ends, err)
	}
	stop()
	if _, _, err := StartEndpoints(ctx, AloneConfig{Name: "rent", NC: js.Conn(), JS: js, Addr: "0.0.0.0:0", Logger: log}); !errors.As(err, new(*ListenError)) {
		t.Errorf("beyond loopback without a token: %v, want a ListenError", err)
	}
}

// TestEndpointsOnATakenAddress: a stack whose endpoints' address is taken
// serves none if they are Optional, and fails if not. (It is also a stack
// run by carol, whose CLI finds her credentials by itself.)
func TestEndpointsOnATakenAddress(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx := natstest.Context(t, time.Minute)
	configDir := t.TempDir()
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Sync: "interval", Metrics: true, Logger: slog.New(slog.DiscardHandler),
		OSUser: "carol", ConfigDir: configDir,
		Node: run.Config{CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 256 << 20, ExecutorKind: run.ExecProcess}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	if !slices.Contains(s.Users(), auth.Identity{Role: auth.Submitter, Name: "carol"}) {
		t.Errorf("users %v, want carol, who runs it", s.Users())
	}
	if creds, err := connect.DevCreds(configDir, s.Broker().ClientURL(), "carol"); err != nil || creds != s.CredsFile("carol") {
		t.Errorf("the CLI finds carol's credentials at %q (%v), want %s", creds, err, s.CredsFile("carol"))
	}
	if addr, err := s.ServeEndpoints(EndpointsConfig{Addr: taken.Addr().String(), Optional: true}); addr != "" || err != nil || s.EndpointsAddr() != "" {
		t.Errorf("optional, taken: %q, %v; want nothing served and no error", addr, err)
	}
	if _, err := s.ServeEndpoints(EndpointsConfig{Addr: taken.Addr().String()}); !errors.As(err, new(*ListenError)) {
		t.Errorf("taken: %v, want a ListenError", err)
	}
	addr, err := s.ServeEndpoints(EndpointsConfig{Addr: "127.0.0.1:0"})
	if err != nil || addr == "" || s.EndpointsAddr() != addr {
		t.Fatalf("free address: %q, %v (EndpointsAddr %q)", addr, err, s.EndpointsAddr())
	}
	// Config.Metrics: the services' handlers, the scheduler and what the
	// ledger mended are there, registered when the stack started.
	_, body := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(body, "e31_scheduler_leader") || !strings.Contains(body, `scheduler="rent-1"`) {
		t.Fatalf("/metrics has no scheduler figures:\n%s", body)
	}
	if !strings.Contains(body, `e31_ledger_mended_total{kind="entry_ahead"} 0`) {
		t.Errorf("/metrics has no count of what the ledger mended:\n%s", body)
	}
}
