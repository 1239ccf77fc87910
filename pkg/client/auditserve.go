package client

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/ops"
)

// Listen binds an operator's endpoints that serve g on /metrics and ready
// on /readyz (ops.Listen, as a command's flags say), or returns nil to
// serve none.
type Listen func(g prometheus.Gatherer, ready map[string]ops.Check) (*ops.Server, error)

// AuditEveryServed is AuditEvery (`e31 audit --every`) with its figures,
// e31_audit_*, served on the endpoints that listen binds, ready while
// connected to NATS. It returns once ctx ends and the endpoints have
// stopped, or at once with listen's error.
func (c *Client) AuditEveryServed(ctx context.Context, heads []chain.Head, every time.Duration, log *slog.Logger, listen Listen) error {
	m := metrics.NewAudit()
	reg, err := metrics.NewRegistry(m)
	if err != nil {
		return err
	}
	srv, err := listen(reg, map[string]ops.Check{"nats": daemon.Connected(c.nc)})
	if err != nil {
		return err
	}
	// A group without a context: the endpoints failing must not stop the
	// audits, which they only show.
	var g errgroup.Group
	if srv != nil {
		log.Info("serving /metrics, /healthz and /readyz", "http", srv.Addr())
		g.Go(func() error {
			if err := srv.Serve(ctx); err != nil {
				log.Error("http endpoints stopped", "err", err)
			}
			return nil
		})
	}
	c.AuditEvery(ctx, heads, every, m, log)
	return g.Wait()
}
