package auth_test

import (
	"testing"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
)

// TestOnlyTheServiceWritesItsCheckpoint: RENT's and OUTPUT's checkpoints
// say where the service that starts begins to read the log. One written
// past a waiting job would leave that job out of RENT's pool for good; one
// written past a job whose output is kept would leave its output out of
// OUTPUT's count, for a sweep to delete while another job still holds it.
// So each service alone writes its own: a submitter, a node or another
// service, with a plain NATS client and its own credentials, can neither
// put it nor purge or delete the bucket.
func TestOnlyTheServiceWritesItsCheckpoint(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	for _, c := range []struct {
		service, bucket, key string
	}{
		{auth.RentService, events.RentBucket, events.RentCheckpointKey},
		{auth.OutputService, events.OutputBucket, events.OutputCheckpointKey},
	} {
		owner := tr.js(t, auth.Identity{Role: auth.Service, Service: c.service, Name: c.service})
		kv, err := owner.KeyValue(ctx, c.bucket)
		if c.service == auth.OutputService {
			// Not made by events.Setup: OUTPUT makes it when it is missing.
			kv, err = events.OpenBucket(ctx, owner, events.OutputBucketConfig(events.StreamOptions{}))
		}
		if err != nil {
			t.Fatalf("%s opens its bucket: %v", c.service, err)
		}
		const honest = `{"from":1}`
		if _, err := kv.Put(ctx, c.key, []byte(honest)); err != nil {
			t.Fatalf("%s writes its checkpoint: %v", c.service, err)
		}
		if e, err := kv.Get(ctx, c.key); err != nil || string(e.Value()) != honest {
			t.Fatalf("%s reads its checkpoint: %v", c.service, err)
		}
		for _, who := range []auth.Identity{
			{Role: auth.Submitter, Name: "alice"},
			{Role: auth.Service, Service: auth.RunService, Name: "node-1"},
			{Role: auth.Service, Service: auth.LedgerService, Name: auth.LedgerService},
			{Role: auth.Service, Service: auth.RentService, Name: auth.RentService},
			{Role: auth.Service, Service: auth.OutputService, Name: auth.OutputService},
		} {
			if who.Service == c.service {
				continue
			}
			nc := tr.conn(t, who)
			for _, subject := range []string{
				"$KV." + c.bucket + "." + c.key,
				"$JS.API.STREAM.PURGE.KV_" + c.bucket,
				"$JS.API.STREAM.DELETE.KV_" + c.bucket,
			} {
				if !refused(t, nc, subject) {
					t.Errorf("%s may publish on %s", who.Name, subject)
				}
			}
		}
		if e, err := kv.Get(ctx, c.key); err != nil || string(e.Value()) != honest {
			t.Fatalf("%s's checkpoint after others tried to write it: %v", c.service, err)
		}
	}
}

// TestOutputPurgesOnlySubmittersBuckets: OUTPUT purges what retention
// deletes from a submitter's bucket, and may purge nothing else: not the
// log, its timers or any bucket of e31's own. A wildcard allows the
// buckets (their streams are named after their submitters), and each of
// e31's streams is denied by name.
func TestOutputPurgesOnlySubmittersBuckets(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	nc := tr.conn(t, auth.Identity{Role: auth.Service, Service: auth.OutputService, Name: auth.OutputService})
	for _, stream := range []string{events.Stream, events.PoisonStream, events.TimerStream, limits.Stream,
		"KV_" + events.LeasesBucket, "KV_" + events.LedgerBucket, "KV_" + events.RentBucket, "KV_" + events.OutputBucket} {
		if subject := "$JS.API.STREAM.PURGE." + stream; !refused(t, nc, subject) {
			t.Errorf("output may purge %s", stream)
		}
	}
	if subject := "$JS.API.STREAM.PURGE.OBJ_" + events.DataBucketFor("alice"); refused(t, nc, subject) {
		t.Errorf("output may not purge alice's bucket, which retention deletes from")
	}
}

// TestEveryCredentialFitsAConnect: a client sends its JWT in its CONNECT,
// and a NATS server takes a CONNECT of up to 4 KiB (max_control_line)
// before it drops the connection, which the client sees as "read/write on
// closed pipe". Every identity's JWT leaves room for the rest of the
// CONNECT (its signature, name and options): a grant that grows past it
// fails here, not on a node that cannot connect.
func TestEveryCredentialFitsAConnect(t *testing.T) {
	t.Parallel()
	k, _, err := auth.InitKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ids := []auth.Identity{{Role: auth.Submitter, Name: "a-submitter-with-a-long-name"}, {Role: auth.Auditor, Name: "auditor"}, {Role: auth.Operator, Name: "operator"}}
	for _, s := range auth.Services {
		name := s
		if s == auth.RunService {
			name = "node-with-a-long-name-01"
		}
		ids = append(ids, auth.Identity{Role: auth.Service, Service: s, Name: name})
	}
	// The rest of a CONNECT takes about 300 bytes (the signature is 86).
	const room = 4096 - 512
	for _, id := range ids {
		c, err := k.Issue(id, 0)
		if err != nil {
			t.Fatalf("issue %s: %v", id, err)
		}
		if len(c.JWT) > room {
			t.Errorf("%s: a JWT of %d bytes, over the %d a CONNECT has room for", id, len(c.JWT), room)
		}
	}
}
