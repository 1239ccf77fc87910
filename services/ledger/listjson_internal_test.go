package ledger

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// TestAListingOfEveryRecordIsTheSameBytes: a listing of every record (e31
// audit's, an operator's export) sends the records read from the bucket
// as stored, without decoding and encoding them again. Its answers must
// be the bytes the decoded records make, page by page, through the stored
// records, the ones still in memory and the page between, and a filtered
// listing (served decoded) must not come this way.
func TestAListingOfEveryRecordIsTheSameBytes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 120*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	appendJobs(t, ctx, pub, 0, 60)
	_, stop := run(t, nc, js)
	stop() // its last flush stores every record
	svc, _ := run(t, nc, js)
	last := appendJobs(t, ctx, pub, 60, 15) // folded in live: in memory
	// A listing as of last is answered once the ledger has folded them.
	data, _ := json.Marshal(wire.ListRequest{MinSeq: last, Limit: 1})
	if _, err := query.Ask(ctx, nc, wire.LedgerSubject(events.Operator, wire.EndpointList), data); err != nil {
		t.Fatal(err)
	}

	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.proj.fresh) == 0 {
		t.Fatal("no record made since the last flush: the test would not reach the records in memory")
	}
	// job-0001 ended before the flush: it is read from the bucket, as stored.
	if found, err := svc.proj.lookupMany([]string{"job-0001"}, true); err != nil || found["job-0001"] == nil || found["job-0001"].raw == nil {
		t.Fatalf("job-0001 read for a listing of every record: %+v (%v), want its record as stored", found["job-0001"], err)
	}
	pages, raws := 0, 0
	for q := (wire.ListRequest{Limit: 14}); ; pages++ {
		recs, more, err := svc.proj.List(q)
		if err != nil {
			t.Fatal(err)
		}
		raw, rawMore, err := svc.proj.ListJSON(q)
		if err != nil {
			t.Fatal(err)
		}
		reply := wire.ListReply{Records: recs, More: more, Applied: last}
		want, err := gojson.Marshal(reply)
		if err != nil {
			t.Fatal(err)
		}
		got, err := listReplyJSON(wire.ListReply{More: rawMore, Applied: last}, raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("page %d after %q: the records as stored make\n%s\nwhere decoded they make\n%s", pages, q.After, got, want)
		}
		for _, l := range raw {
			if len(l) > 0 {
				raws++
			}
		}
		if !more {
			break
		}
		q.After = recs[len(recs)-1].Job
	}
	if pages < 5 || raws != 75 {
		t.Errorf("%d pages, %d records; want 6 pages of every one of the 75", pages+1, raws)
	}

	if whole(wire.ListRequest{Submitter: "team-1"}) || whole(wire.ListRequest{Sweep: "s"}) || whole(wire.ListRequest{Node: "n1"}) ||
		whole(wire.ListRequest{Since: time.Now()}) || whole(wire.ListRequest{Until: time.Now()}) {
		t.Error("a filtered listing is taken for one of every record")
	}
	if _, _, err := svc.proj.ListJSON(wire.ListRequest{Submitter: events.Operator}); err == nil {
		t.Error("ListJSON served a filtered listing")
	}
}
