package hostile_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// replies sends a question to every query endpoint with a reply
// subject that names something else than mallory's inbox: a lease, an
// object of honest's bucket, every event subject of honest's running job,
// the JetStream API, honest's inbox. A service that answers there
// publishes with its own rights, on a subject mallory may not publish on.
// Nothing may be published on any of them.
func (s *suite) replies(t *testing.T) {
	w, mal := s.w, s.mal
	running := submitHonest(t, "running-during-replies", 8*time.Second)
	own := mal.submit(t, "replies-own", quick("replies-own"))
	evs, ok := w.waitFor(t, running.id, 30*time.Second, has(typeStarted))
	if !ok {
		t.Fatalf("honest's job %s did not start within 30 s, before any attack: %s", running.id, journey(evs))
	}
	nodeName := node(evs)
	if end, evs := w.waitOver(t, own, 30*time.Second); end == "" {
		t.Fatalf("mallory's job %s did not end within 30 s, before any attack: %s", own, journey(evs))
	}

	type target struct {
		subject string
		legit   func(*nats.Msg) bool
	}
	var targets []target
	// Leases: the node that runs honest's job, and the scheduler's.
	// Their owners renew them with the same value.
	leases := w.leases(t)
	for _, key := range []string{"node." + nodeName, "leader.rent"} {
		owner, ok := leases[key]
		if !ok {
			t.Fatalf("no lease %s in %s (leases: %v)", key, leasesBucket, leases)
		}
		targets = append(targets, target{"$KV." + leasesBucket + "." + key, func(m *nats.Msg) bool { return string(m.Data) == owner }})
	}
	// honest's bucket: a name of nothing, and the metadata of the input
	// the warm-up job staged (which no one rewrites while it is stored).
	bucket := "E31_DATA_" + honest
	staged := w.objects(t, bucket)[0]
	targets = append(targets,
		target{"$O." + bucket + ".M.x", anything},
		target{"$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(staged)), anything})
	// Every event subject of honest's running job (and of its node): only
	// that type's event belongs there.
	for _, k := range kinds(t) {
		about := running.id
		if strings.HasPrefix(k.subject, "e31.node.") {
			about = nodeName
		}
		targets = append(targets, target{k.subjectFor(about, nodeName, honest), func(m *nats.Msg) bool { return m.Header.Get("ce-type") == k.ceType }})
	}
	// The JetStream API: a request there carries its own reply subject;
	// an answer forwarded there has none.
	targets = append(targets, target{"$JS.API.STREAM.INFO." + logStream, func(m *nats.Msg) bool { return m.Reply != "" }})
	// Another tenant's inbox.
	targets = append(targets, target{"_INBOX_submitter_" + honest + ".x", anything})

	endpoints := []struct {
		name string
		q    any
	}{
		{"ledger.record", map[string]any{"job": own}},
		{"ledger.list", map[string]any{}},
		{"ledger.totals", map[string]any{}},
		{"ledger.events", map[string]any{"job": own}},
		{"ledger.head", map[string]any{}},
		{"rent.why", map[string]any{"job": own}},
		{"output.stored", map[string]any{}},
	}
	before := w.lastSeq(t)
	for _, e := range endpoints {
		t.Run(e.name, func(t *testing.T) {
			for _, tg := range targets {
				w.watch(tg.subject, tg.legit)
			}
			for _, tg := range targets {
				if err := mal.nc.PublishMsg(&nats.Msg{Subject: mal.api(e.name), Reply: tg.subject, Data: mustJSON(e.q)}); err != nil {
					t.Fatalf("mallory: publish to %s: %v", mal.api(e.name), err)
				}
			}
			// A question of mallory's own, answered, shows the endpoint
			// has read the attack's requests; a moment more lets answers
			// handled concurrently go out.
			if err := mal.askPatiently(e.name, e.q, nil); err != nil {
				t.Errorf("%s did not answer mallory's own question with its own inbox: %v", mal.api(e.name), err)
			}
			time.Sleep(500 * time.Millisecond) // waiting for the absence of a message: there is no event to wait on
			if leaks := w.unwatch(t); len(leaks) > 0 {
				var where []string
				for _, m := range leaks {
					if !slices.Contains(where, m.Subject) {
						where = append(where, m.Subject)
					}
				}
				t.Errorf("mallory asked %s with the reply subject of something else, and e31 published its answer there, on %d of %d targets: %s; "+
					"the first, %d bytes on %s: %s", mal.api(e.name), len(where), len(targets), strings.Join(where, ", "),
					len(leaks[0].Data), leaks[0].Subject, clip(string(leaks[0].Data), 200))
			}
		})
	}

	if refused := mal.takeRefusals(); len(refused) > 0 {
		t.Logf("the server itself refused %d of mallory's publishes, e.g.: %v", len(refused), refused[0])
	}
	after := w.leases(t)
	for _, key := range []string{"node." + nodeName, "leader.rent"} {
		if after[key] != leases[key] {
			t.Errorf("the lease %s is now held by %q, was %q: a reply overwrote it", key, after[key], leases[key])
		}
	}
	if err := w.readObject(t, bucket, staged); err != nil {
		t.Errorf("after the reply attack honest's staged object %s cannot be read: %v", staged, err)
	}
	aftermath(t, s, "replies", before, running)
}

// objects is the names of the objects in bucket, as the operator lists
// them.
func (w *watcher) objects(t testing.TB, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := w.js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatalf("operator: open %s: %v", bucket, err)
	}
	list, err := obs.List(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("operator: %s holds no object after honest staged one: %v", bucket, err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Name)
	}
	return names
}

// readObject reads one object of bucket whole, as the operator: an
// object whose metadata was overwritten no longer reads.
func (w *watcher) readObject(t testing.TB, bucket, name string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := w.js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatalf("operator: open %s: %v", bucket, err)
	}
	_, err = obs.GetBytes(ctx, name)
	return err
}

// objectBytes reads one object of bucket whole, as the operator.
func (w *watcher) objectBytes(t testing.TB, bucket, name string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := w.js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return obs.GetBytes(ctx, name)
}
