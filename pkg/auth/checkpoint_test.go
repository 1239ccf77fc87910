package auth_test

import (
	"testing"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
)

// TestOnlyRentWritesItsCheckpoint: RENT's checkpoint says where a RENT
// that starts begins to read the log. One written past a waiting job would
// leave that job out of the pool for good, so RENT alone writes it: a
// submitter or a node, with a plain NATS client and its own credentials,
// can neither put it nor purge the bucket.
func TestOnlyRentWritesItsCheckpoint(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	rent := tr.js(t, auth.Identity{Role: auth.Service, Service: auth.RentService, Name: auth.RentService})
	kv, err := rent.KeyValue(ctx, events.RentBucket)
	if err != nil {
		t.Fatalf("rent opens its bucket: %v", err)
	}
	const honest = `{"from":1}`
	if _, err := kv.Put(ctx, events.RentCheckpointKey, []byte(honest)); err != nil {
		t.Fatalf("rent writes its checkpoint: %v", err)
	}
	if e, err := kv.Get(ctx, events.RentCheckpointKey); err != nil || string(e.Value()) != honest {
		t.Fatalf("rent reads its checkpoint: %v", err)
	}

	for _, who := range []auth.Identity{
		{Role: auth.Submitter, Name: "alice"},
		{Role: auth.Service, Service: auth.RunService, Name: "node-1"},
		{Role: auth.Service, Service: auth.LedgerService, Name: auth.LedgerService},
	} {
		nc := tr.conn(t, who)
		for _, subject := range []string{
			"$KV." + events.RentBucket + "." + events.RentCheckpointKey,
			"$JS.API.STREAM.PURGE.KV_" + events.RentBucket,
			"$JS.API.STREAM.DELETE.KV_" + events.RentBucket,
		} {
			if !refused(t, nc, subject) {
				t.Errorf("%s may publish on %s", who.Name, subject)
			}
		}
	}
	if e, err := kv.Get(ctx, events.RentCheckpointKey); err != nil || string(e.Value()) != honest {
		t.Fatalf("rent's checkpoint after others tried to write it: %v", err)
	}
}
