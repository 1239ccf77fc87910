package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// Cluster is three embedded JetStream servers routed to each other, every
// e31 stream made with three replicas.
type Cluster struct {
	// Servers are the cluster's servers, named s1, s2 and s3.
	Servers []*server.Server
	// JS is a client of every server, which reconnects to another when
	// the one it is on goes away.
	JS jetstream.JetStream
}

// StartCluster runs a Cluster for tb, shut down when the test ends, and
// returns it once the cluster has taken e31's streams.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	routes := server.RoutesFromStr(fmt.Sprintf("nats://127.0.0.1:%d,nats://127.0.0.1:%d,nats://127.0.0.1:%d", ports[0], ports[1], ports[2]))
	c := &Cluster{}
	var urls []string
	for i := range 3 {
		// A listener on loopback, not DontListen, which disables clustering.
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "natstest", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			tb.Fatal(err)
		}
		go s.Start()
		tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(10 * time.Second) {
			tb.Fatalf("natstest: server %d not ready", i+1)
		}
		c.Servers = append(c.Servers, s)
		urls = append(urls, s.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	if c.JS, err = jetstream.New(nc); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A fresh cluster elects its meta leader after it accepts connections.
	for {
		// Each try with a deadline of its own: a request sent before the
		// leader is known may go unanswered.
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		err := events.Setup(tctx, c.JS, events.StreamOptions{Replicas: 3})
		tcancel()
		if err == nil {
			return c
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("natstest: the cluster did not take the streams: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Server is the server of the cluster named name, or nil.
func (c *Cluster) Server(name string) *server.Server {
	for _, s := range c.Servers {
		if s.Name() == name {
			return s
		}
	}
	return nil
}
