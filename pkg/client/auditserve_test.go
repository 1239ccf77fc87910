package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/e31net/e31/pkg/ops"
)

// TestAuditsAreServed: `e31 audit --every` serves e31_audit_* (here, of
// audits that cannot run: there is no log) until it is stopped, and a
// refused address is its error.
func TestAuditsAreServed(t *testing.T) {
	t.Parallel()
	c, _ := busyClient(t, 0)
	js, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	c.js = js
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- c.AuditEveryServed(ctx, nil, time.Hour, log, func(g prometheus.Gatherer, ready map[string]ops.Check) (*ops.Server, error) {
			s, err := ops.Listen(ops.Config{Addr: "127.0.0.1:0", Gatherer: g, Ready: ready, Logger: log})
			if err == nil {
				addr <- s.Addr()
			}
			return s, err
		})
	}()
	// The address is bound before it is handed over, and the counters of
	// every result exist from the start: the first scrape has them.
	resp, err := http.Get("http://" + <-addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "e31_audit_runs_total") {
		t.Fatalf("/metrics without e31_audit_runs_total:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("stopped: %v", err)
	}
	refused := errors.New("refused")
	err = c.AuditEveryServed(context.Background(), nil, time.Hour, log, func(prometheus.Gatherer, map[string]ops.Check) (*ops.Server, error) { return nil, refused })
	if !errors.Is(err, refused) {
		t.Errorf("an address refused: %v", err)
	}
}
