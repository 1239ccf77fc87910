package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	mobynet "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"

	"github.com/e31net/e31/pkg/events"
)

// Network faults between the cluster's containers, made with the
// engine's own networking, the kernel's: a container taken off the
// cluster's network keeps running, and its packets go nowhere. To the
// others it falls silent (no FIN, no RST: a real partition); its own
// connections fail. Two containers isolated together are put on an island
// network of their own first, where each still reaches the other by name.

// fault is one thing the cluster test does to the cluster: it makes it
// with do and undoes it with undo once the rest carried on without it.
type fault struct {
	name string // what it hits: submit-1, node-2, nats-3, "nats-2 cut off", …
	// named, when set, is the name do found (who leads is known only then).
	named *string
	do    func(ctx context.Context) error
	undo  func(ctx context.Context) error
	// node, for a fault that takes a run node away: the node's id. It is
	// undone once RENT has found the node lost.
	node string
	// partition: made only once every fault before it is undone, so that
	// two faults never take out both instances of a service at once.
	partition bool
}

// aliases are the names a container of class, named name, has on the
// cluster's network (see start).
func aliases(class, name string) []string {
	if class == "run" {
		return []string{name, "run-" + strings.TrimPrefix(name, "node-")}
	}
	if class == "nats" {
		return []string{name}
	}
	return []string{name, class}
}

// detach takes ctr off the network nw.
func (c *cluster) detach(ctx context.Context, nw *testcontainers.DockerNetwork, ctr *testcontainers.DockerContainer) error {
	_, err := c.docker.NetworkDisconnect(ctx, nw.ID, client.NetworkDisconnectOptions{Container: ctr.GetContainerID(), Force: true})
	return err
}

// attach puts ctr on the network nw under the given names.
func (c *cluster) attach(ctx context.Context, nw *testcontainers.DockerNetwork, ctr *testcontainers.DockerContainer, names []string) error {
	_, err := c.docker.NetworkConnect(ctx, nw.ID, client.NetworkConnectOptions{Container: ctr.GetContainerID(),
		EndpointConfig: &mobynet.EndpointSettings{Aliases: names}})
	return err
}

// cutOff is the fault of one container taken off the cluster's network.
func (c *cluster) cutOff(class, name string, ctr *testcontainers.DockerContainer) fault {
	f := fault{name: name + " cut off", partition: true,
		do: func(ctx context.Context) error {
			if class == "nats" {
				c.setAway(name, true)
			}
			return c.detach(ctx, c.net, ctr)
		},
		undo: func(ctx context.Context) error {
			if class == "nats" {
				defer c.setAway(name, false)
			}
			return c.attach(ctx, c.net, ctr, aliases(class, name))
		}}
	if class == "run" {
		f.node = name
	}
	return f
}

// leaderIsland is the fault of the RENT instance that leads isolated with
// the NATS server that leads the leases bucket's stream: the two reach
// each other and nothing else. Who they are is read when it is made.
func (c *cluster) leaderIsland(js jetstream.JetStream) fault {
	var rent, nats *testcontainers.DockerContainer
	var rentName, natsName string
	var island *testcontainers.DockerNetwork
	named := ""
	f := fault{name: "the RENT leader isolated with a NATS server", named: &named, partition: true}
	f.do = func(ctx context.Context) error {
		rentName, natsName = "rent-1", "nats-1"
		if kv, err := js.KeyValue(ctx, events.LeasesBucket); err == nil {
			if e, err := kv.Get(ctx, "leader.rent"); err == nil {
				rentName = string(e.Value())
			}
		}
		if st, err := js.Stream(ctx, events.KVStream(events.LeasesBucket)); err == nil && st.CachedInfo().Cluster != nil && st.CachedInfo().Cluster.Leader != "" {
			natsName = st.CachedInfo().Cluster.Leader
		}
		var i, k int
		if _, err := fmt.Sscanf(rentName, "rent-%d", &i); err != nil || i < 1 || i > len(c.svcs["rent"]) {
			return fmt.Errorf("the leader is %q, not one of the RENT instances", rentName)
		}
		if _, err := fmt.Sscanf(natsName, "nats-%d", &k); err != nil || k < 1 || k > len(c.nats) {
			return fmt.Errorf("the leases' stream leader is %q, not one of the NATS servers", natsName)
		}
		rent, nats = c.svcs["rent"][i-1], c.nats[k-1]
		c.setAway(natsName, true)
		named = fmt.Sprintf("%s (leading) isolated with %s (the leases' leader)", rentName, natsName)
		var err error
		if island, err = network.New(ctx); err != nil {
			return err
		}
		testcontainers.CleanupNetwork(c.t, island)
		if err := c.attach(ctx, island, nats, aliases("nats", natsName)); err != nil {
			return err
		}
		if err := c.attach(ctx, island, rent, aliases("rent", rentName)); err != nil {
			return err
		}
		if err := c.detach(ctx, c.net, nats); err != nil {
			return err
		}
		return c.detach(ctx, c.net, rent)
	}
	f.undo = func(ctx context.Context) error {
		defer c.setAway(natsName, false)
		for _, step := range []func() error{
			func() error { return c.attach(ctx, c.net, nats, aliases("nats", natsName)) },
			func() error { return c.attach(ctx, c.net, rent, aliases("rent", rentName)) },
			func() error { return c.detach(ctx, island, rent) },
			func() error { return c.detach(ctx, island, nats) },
		} {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	}
	return f
}

// String is what the fault hit.
func (f fault) String() string {
	if f.named != nil && *f.named != "" {
		return *f.named
	}
	return f.name
}

// killed is the fault of a container killed with SIGKILL and started again.
func (c *cluster) killed(name string, ctr *testcontainers.DockerContainer, node bool) fault {
	f := fault{name: name,
		do: func(ctx context.Context) error {
			c.setAway(name, true)
			return c.kill(ctx, ctr)
		},
		undo: func(ctx context.Context) error {
			defer c.setAway(name, false)
			return ctr.Start(ctx)
		}}
	if node {
		f.node = name
	}
	return f
}

// clusterJob is the cluster test's job: it leaves its attempt in
// /shared/ran.log (the run nodes' shared folder, on the host) and runs
// under its trace name for the process table (see tracedCommand).
func clusterJob() []string {
	return tracedCommand(`echo "$E31_JOB_ID $E31_ATTEMPT" >> /shared/ran.log; sleep 0.3; echo ok > "$E31_OUTPUT/ok.txt"`)
}

// gapFigures says the shortest and longest of the gaps between one
// attempt's end and the next one's start.
func gapFigures(gaps []time.Duration) string {
	if len(gaps) == 0 {
		return "no job was run twice"
	}
	lo, hi := gaps[0], gaps[0]
	for _, g := range gaps {
		lo, hi = min(lo, g), max(hi, g)
	}
	return fmt.Sprintf("%d jobs run again: the next attempt began %s to %s after the one before ended, by the process table", len(gaps), lo.Round(time.Millisecond), hi.Round(time.Millisecond))
}
