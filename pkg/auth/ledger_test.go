package auth_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// TestOnlyTheLedgerReadsItsBucket: the ledger's bucket holds every
// tenant's records. The LEDGER reads and writes it; a submitter, with a
// plain NATS client and its own credentials, can neither read a key, nor
// list or watch them, nor learn the bucket's size.
func TestOnlyTheLedgerReadsItsBucket(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	_, kv := ledgersBucket(t, ctx, tr)
	if _, err := kv.Put(ctx, "rec.bobs-job", []byte(`{"job":"bobs-job","owner":"bob"}`)); err != nil {
		t.Fatalf("the ledger writes its bucket: %v", err)
	}
	if e, err := kv.Get(ctx, "rec.bobs-job"); err != nil || len(e.Value()) == 0 {
		t.Fatalf("the ledger reads its bucket: %v", err)
	}

	alice := tr.conn(t, auth.Identity{Role: auth.Submitter, Name: "alice"})
	stream := "KV_" + events.LedgerBucket
	for _, subject := range []string{
		"$JS.API.DIRECT.GET." + stream + ".$KV." + events.LedgerBucket + ".rec.bobs-job",
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.CREATE." + stream,
	} {
		m, err := alice.Request(subject, []byte(`{"last_by_subj":"$KV.E31_LEDGER.rec.bobs-job","seq":1}`), 500*time.Millisecond)
		if err == nil && (m.Header.Get("Nats-Subject") != "" || bytes.Contains(m.Data, []byte("bobs-job")) || bytes.Contains(m.Data, []byte(stream))) {
			t.Errorf("alice asked %s and was told of the ledger's bucket: %s", subject, m.Data)
		}
	}
	aliceJS, err := jetstream.New(alice)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if akv, err := aliceJS.KeyValue(short, events.LedgerBucket); err == nil {
		if e, err := akv.Get(short, "rec.bobs-job"); err == nil {
			t.Errorf("alice read bob's entry from the ledger's bucket: %s", e.Value())
		}
	}
	// Nor does a service that needs no records: each finds the bucket on
	// start (events.Setup) but reads nothing of it. SUBMIT and OUTPUT
	// reach every submitter's bucket through a wildcard over every stream,
	// which the ledger's is denied from. (A run node, whose credentials
	// are the likeliest to leak, does not even find it: TestANodeReaches.)
	for _, who := range []auth.Identity{
		{Role: auth.Service, Service: auth.ReleaseService, Name: auth.ReleaseService},
		{Role: auth.Service, Service: auth.SubmitService, Name: auth.SubmitService},
		{Role: auth.Service, Service: auth.OutputService, Name: auth.OutputService},
	} {
		js := tr.js(t, who)
		skv, err := js.KeyValue(ctx, events.LedgerBucket)
		if err != nil {
			t.Fatalf("%s finds the bucket on start: %v", who.Name, err)
		}
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		if e, err := skv.Get(short, "rec.bobs-job"); err == nil {
			t.Errorf("%s read an entry of the ledger's bucket: %s", who.Name, e.Value())
		}
		if w, err := skv.WatchAll(short); err == nil {
			select {
			case e := <-w.Updates():
				if e != nil {
					t.Errorf("%s watched the ledger's bucket: %s %s", who.Name, e.Key(), e.Value())
				}
			case <-short.Done():
			}
			_ = w.Stop()
		}
		cancel()
	}
}

// ledgersBucket is the ledger's bucket as the LEDGER opens it.
func ledgersBucket(t *testing.T, ctx context.Context, tr *trusted) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js := tr.js(t, auth.Identity{Role: auth.Service, Service: auth.LedgerService, Name: auth.LedgerService})
	kv, err := js.KeyValue(ctx, events.LedgerBucket)
	if err != nil {
		t.Fatalf("the ledger opens its bucket: %v", err)
	}
	return js, kv
}

// TestTheAuditorReadsTheLedgersBucketOnly: e31 audit compares the records
// where the ledger keeps them. The auditor, who reads every tenant's
// events in the log already, may read the bucket (direct gets, the
// leader's, a consumer); it may not write a record, delete one, purge the
// bucket, or delete a consumer of it (the ledger's reads).
func TestTheAuditorReadsTheLedgersBucketOnly(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	ledger, lkv := ledgersBucket(t, ctx, tr)
	if _, err := lkv.Put(ctx, events.LedgerRecordPrefix+"bobs-job", []byte(`{"record":{"job":"bobs-job"}}`)); err != nil {
		t.Fatal(err)
	}
	stream := events.KVStream(events.LedgerBucket)
	ledgersRead, err := ledger.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	js := tr.js(t, auth.Identity{Role: auth.Auditor, Name: auth.AuditorName})
	kv, err := js.KeyValue(ctx, events.LedgerBucket)
	if err != nil {
		t.Fatalf("the auditor opens the ledger's bucket: %v", err)
	}
	if e, err := kv.Get(ctx, events.LedgerRecordPrefix+"bobs-job"); err != nil || !bytes.Contains(e.Value(), []byte("bobs-job")) {
		t.Fatalf("the auditor reads a record: %v", err)
	}
	if m, err := bus.LeaderLast(ctx, js, stream, "$KV."+events.LedgerBucket+"."+events.LedgerRecordPrefix+"bobs-job"); err != nil || !bytes.Contains(m.Data, []byte("bobs-job")) {
		t.Fatalf("the auditor reads a record from the bucket's leader: %v", err)
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"$KV." + events.LedgerBucket + ".>"}})
	if err != nil {
		t.Fatalf("the auditor reads the bucket in order: %v", err)
	}
	if m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil || !bytes.Contains(m.Data(), []byte("bobs-job")) {
		t.Fatalf("the auditor reads the bucket in order: %v", err)
	}

	// A publish the server refuses goes unanswered: each try waits out
	// a short deadline of its own.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		t.Cleanup(cancel)
		return c
	}
	if _, err := kv.Put(short(), events.LedgerRecordPrefix+"bobs-job", []byte(`{"record":{"job":"bobs-job","state":"released"}}`)); err == nil {
		t.Error("the auditor wrote a record of the ledger's")
	}
	if err := kv.Delete(short(), events.LedgerRecordPrefix+"bobs-job"); err == nil {
		t.Error("the auditor deleted a record of the ledger's")
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("the auditor reads the bucket's state: %v", err)
	}
	if err := s.Purge(short()); err == nil {
		t.Error("the auditor purged the ledger's bucket")
	}
	if err := s.DeleteConsumer(short(), ledgersRead.CachedInfo().Name); err == nil {
		t.Error("the auditor deleted the ledger's consumer of its bucket")
	}
	if e, err := lkv.Get(ctx, events.LedgerRecordPrefix+"bobs-job"); err != nil || bytes.Contains(e.Value(), []byte("released")) {
		t.Errorf("the record after the auditor's attempts: %v", err)
	}
}
