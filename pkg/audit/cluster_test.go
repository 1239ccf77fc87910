package audit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestTheLogIsReadWholeWhenTheConsumersServerGoesAway: the audit reads the
// log with a consumer of one replica, which lives on one server of a
// cluster. That server shut down mid-read, nobody answers the consumer's
// pulls; the read makes its consumer again on a server that answers and
// goes on from where it was, every message once and in order. It failed
// instead ("no responders"), in the cluster test's audit just after its
// faults.
func TestTheLogIsReadWholeWhenTheConsumersServerGoesAway(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t)
	js := c.JS
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 3000
	for i := range n {
		m := nats.NewMsg(fmt.Sprintf("e31.job.job-%d.requested.alice", i))
		m.Data = []byte("{}")
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the log was not written")
	}
	info, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	last := info.CachedInfo().State.LastSeq

	next, stopped := uint64(1), ""
	err = readLog(ctx, js, last, func(m Raw) error {
		if m.Seq != next {
			return fmt.Errorf("#%d read after #%d", m.Seq, next-1)
		}
		next++
		if m.Seq == 100 {
			// The one consumer of the log is the read's.
			st, err := js.Stream(ctx, events.Stream)
			if err != nil {
				return err
			}
			for info := range st.ListConsumers(ctx).Info() {
				if info.Cluster != nil && info.Cluster.Leader != "" {
					stopped = info.Cluster.Leader
				}
			}
			s := c.Server(stopped)
			if s == nil {
				return fmt.Errorf("the read's consumer is on %q, no server of the cluster", stopped)
			}
			s.Shutdown()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the log with %s shut down after #100: %v", stopped, err)
	}
	if next != last+1 {
		t.Fatalf("read up to #%d of #%d", next-1, last)
	}
	t.Logf("the log read whole, #1 to #%d, with %s shut down after #100", last, stopped)
}
