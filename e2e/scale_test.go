package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// BenchmarkAddingAnInstanceUnderLoad measures what a second SUBMIT brings:
// a backlog of requests is stored, one SUBMIT instance works on it, and
// halfway through a second one joins, sharing its durable consumer. It
// reports the rate before and after (requests a second), and checks that
// every request was answered exactly once.
//
//	go test -run '^$' -bench AddingAnInstance -benchtime 1x ./e2e/
func BenchmarkAddingAnInstanceUnderLoad(b *testing.B) {
	const n = 20000
	for range b.N {
		sys := startSystem(b, systemOptions{instances: map[string]int{}, leaseTTL: 5 * time.Second})
		_, js := sys.connect()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		spec := tracedJob(b, "/dev/null", 0)
		ids := jobIDs("scale", n)
		submitAll(ctx, b, js, "scale", spec, ids)

		start := time.Now()
		sys.add("submit", 1, 0)
		half := ids[:n/2]
		if left := waitCount(ctx, js, n/2); left > 0 {
			b.Fatalf("one SUBMIT: %d of %d not answered", left, len(half))
		}
		one := time.Since(start)
		start = time.Now()
		sys.add("submit", 2, 0)
		if left := waitCount(ctx, js, n); left > 0 {
			b.Fatalf("two SUBMITs: %d of %d not answered", left, n)
		}
		two := time.Since(start)
		rep := readLog(ctx, b, js)
		for _, id := range ids {
			if j := rep.jobs[id]; j == nil || j.submitted != 1 {
				b.Fatalf("job %s answered %+v, want once", id, j)
			}
		}
		cancel()
		b.ReportMetric(float64(n/2)/one.Seconds(), "one_per_s")
		b.ReportMetric(float64(n-n/2)/two.Seconds(), "two_per_s")
	}
}

// waitCount follows JobSubmitted from the start of the log until it has
// seen want of them, and returns how many it is short when ctx ends.
func waitCount(ctx context.Context, js jetstream.JetStream, want int) int {
	cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.KindSubject(events.TypeJobSubmitted)}})
	if err != nil {
		return want
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return want
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	seen := 0
	for seen < want {
		if _, err := it.Next(); err != nil {
			break
		}
		seen++
	}
	return want - seen
}
