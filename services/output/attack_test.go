package output_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/query/querytest"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/output"
)

// TestStoredAnswersTheAskersInboxOnly: OUTPUT, running under its own
// credentials, answers no request of a submitter's whose reply subject
// names a lease key, an object store, an event subject, the JetStream API
// or another identity's inbox, and counts each.
func TestStoredAnswersTheAskersInboxOnly(t *testing.T) {
	t.Parallel()
	qs := querytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := querytest.Service(auth.OutputService)
	js := qs.JetStream(t, id)
	stores, err := stage.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := output.New(js, output.Config{Stores: stores, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		if err := svc.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("output: %v", err)
		}
	})

	alice := qs.Conn(t, querytest.Submitter("alice"))
	body, _ := json.Marshal(wire.StoredRequest{Fresh: true})
	subject := wire.OutputStoredSubject("alice")
	var reply wire.StoredReply
	if err := json.Unmarshal(querytest.WaitServed(t, alice, subject, body).Data, &reply); err != nil || reply.Error != "" || reply.Applied != 0 {
		t.Fatalf("alice's fresh stored: %+v (%v)", reply, err)
	}
	qs.AssertNothingLands(t, alice, subject, body, func() uint64 { return svc.QueryStats().Refused })
}
