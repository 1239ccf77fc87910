package query_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
)

func TestReplyAllowed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		user, reply string
		want        bool
	}{
		{"alice", "_INBOX_submitter_alice.abc", true},
		{"alice", "_INBOX_submitter_alice.abc.def", true},
		{"alice", "_INBOX_submitter_alice", false},  // no token after the prefix
		{"alice", "_INBOX_submitter_alice.", false}, // an empty token
		{"alice", "_INBOX_submitter_alice.*", false},
		{"alice", "_INBOX_submitter_alice.>", false},
		{"alice", "_INBOX_submitter_alicex.abc", false},
		{"alice", "_INBOX_submitter_bob.abc", false},
		{"alice", "_INBOX.abc", false},
		{"alice", "", false},
		{"alice", "$KV.E31_LEASES.node.x", false},
		{"alice", "$JS.API.STREAM.INFO.E31", false},
		{"alice", "e31.job.j1.submitted", false},
		{"alice", "_INBOX_auditor_a1.abc", false},
		{"auditor", "_INBOX_auditor_a1.abc", true},
		{"auditor", "_INBOX_auditor_local.abc", true},
		{"auditor", "_INBOX_auditor_.abc", false},
		{"auditor", "_INBOX_auditor_a.b.abc", true}, // auditor "a", reply token "b.abc"
		{"auditor", "_INBOX_submitter_auditor.abc", false},
		{"auditor", "_INBOX_operator_root.abc", false},
		{"operator", "_INBOX_operator_root.abc", true},
		{"operator", "_INBOX_submitter_operator.abc", false},
		{"operator", "_INBOX_service_rent_rent-1.abc", false},
		// Names no submitter may have are no submitter's inbox.
		{"ledger", "_INBOX_submitter_ledger.abc", false},
		{"", "_INBOX_submitter_.abc", false},
		// A submitter's request through the TENANTS import: the server's
		// own reply, which no client can send.
		{"alice", "_R_.aBc123.dEf456", true},
		{"alice", "_R_.aBc123.*", false},
		{"alice", "_R_", false},
		{"alice", "_R_.", false},
		{"auditor", "_R_.aBc123.dEf456", false},
		{"operator", "_R_.aBc123.dEf456", false},
		{"ledger", "_R_.aBc123.dEf456", false},
	} {
		if got := query.ReplyAllowed(c.user, c.reply); got != c.want {
			t.Errorf("ReplyAllowed(%q, %q) = %v, want %v", c.user, c.reply, got, c.want)
		}
	}
	for _, user := range []string{"alice", auth.AuditorName, "operator"} {
		if reply := query.InboxPrefix(user) + ".x"; !query.ReplyAllowed(user, reply) {
			t.Errorf("%s may not be answered on its own InboxPrefix: %s", user, reply)
		}
	}
}

// TestBeyondALimitIsBusy: with small limits, a user's long polls beyond
// its cap and its requests beyond its in-flight limit are answered busy at
// once, while another user is served; once the waits end, every admitted
// request is answered.
func TestBeyondALimitIsBusy(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := srv.Conn(t)
	release := make(chan struct{})
	s := query.New(nc, query.Config{Name: "e31-test", Version: "0.0.1",
		Limits: query.Limits{InFlight: 10, InFlightPerUser: 4, LongPollsPerUser: 2, MaxWait: 20 * time.Second}})
	subject := func(user string) string { return "e31.api." + user + ".test.ask" }
	s.Handle("ask", subject("*"), func(r *query.Request) {
		if string(r.Data()) == "wait" {
			if _, err := r.Await(release, r.Deadline(time.Minute)); err != nil {
				r.Busy(err)
				return
			}
		}
		r.Respond(map[string]string{"user": r.User})
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := natstest.Context(t, 30*time.Second)
	ask := func(user, body string) (string, string) {
		m, err := query.Ask(ctx, nc, subject(user), []byte(body))
		if err != nil {
			t.Error(err)
			return "", ""
		}
		var reply struct{ User, Error, Code string }
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			t.Error(err)
		}
		return reply.User, reply.Code + " " + reply.Error
	}
	held := make(chan string, 2)
	for range 2 {
		go func() { u, _ := ask("alice", "wait"); held <- u }()
	}
	waitUntil(t, func() bool { return s.Stats().LongPolls == 2 })
	if _, busy := ask("alice", "wait"); !strings.HasPrefix(busy, "busy busy: alice holds 2 long polls open") || !strings.HasSuffix(busy, ", retry") {
		t.Errorf("alice's third long poll: %q, want busy", busy)
	}
	if u, _ := ask("alice", "now"); u != "alice" {
		t.Errorf("alice's question beside her long polls: %q", u)
	}
	if u, _ := ask("bob", "now"); u != "bob" {
		t.Errorf("bob's question: %q", u)
	}
	// A handler leaves the count just after its answer is sent, so the
	// two answered questions may still be counted for a moment.
	waitUntil(t, func() bool { return s.Stats().InFlight <= 2 })
	if st := s.Stats(); st.Busy != 1 || st.LongPolls != 2 || st.InFlight != 2 {
		t.Errorf("stats %+v, want 1 busy, 2 long polls in flight", st)
	}
	close(release)
	for range 2 {
		if u := <-held; u != "alice" {
			t.Errorf("a long poll answered %q", u)
		}
	}
	s.Stop()
	if st := s.Stats(); st.InFlight != 0 || st.LongPolls != 0 {
		t.Errorf("stats after Stop %+v, want nothing in flight", st)
	}
}

// TestStopEndsTheWaits: Stop ends the requests' waits and waits for their
// handlers, which answer.
func TestStopEndsTheWaits(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := srv.Conn(t)
	s := query.New(nc, query.Config{Name: "e31-test", Version: "0.0.1"})
	s.Handle("ask", "e31.api.*.test.ask", func(r *query.Request) {
		changed, err := r.Await(nil, r.Deadline(time.Hour))
		r.Respond(map[string]any{"changed": changed, "err": err, "ctx": r.Context().Err() != nil})
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := natstest.Context(t, 30*time.Second)
	got := make(chan string, 1)
	go func() {
		m, err := query.Ask(ctx, nc, "e31.api.alice.test.ask", nil)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(m.Data)
	}()
	waitUntil(t, func() bool { return s.Stats().LongPolls == 1 })
	s.Stop()
	if answer := <-got; answer != `{"changed":false,"ctx":true,"err":null}` {
		t.Errorf("answer after Stop: %s", answer)
	}
}

// waitUntil waits, with a deadline, for cond: the server's counts move in
// its own goroutines, with no event to wait on.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		<-tick.C
	}
}
