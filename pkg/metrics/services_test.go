package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/metrics"
)

func TestHandlers(t *testing.T) {
	t.Parallel()
	h := metrics.NewHandlers()
	var wg sync.WaitGroup
	for lane := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Handled("release", "returned", time.Millisecond, nil)
			if lane == 0 {
				h.Handled("release", "returned", time.Second, bus.Permanent(errors.New("bad body")))
				h.Poisoned("release")
			}
			if lane == 1 {
				h.Handled("release", "returned", time.Second, fmt.Errorf("append: %w", bus.ErrConflict))
				h.Handled("release", "returned", time.Second, context.DeadlineExceeded)
			}
		}()
	}
	wg.Wait()
	want := `
# HELP e31_handler_errors_total Events a service's handler failed on: transient (delivered again), permanent (to the poison stream) or timeout.
# TYPE e31_handler_errors_total counter
e31_handler_errors_total{reason="permanent",service="release"} 1
e31_handler_errors_total{reason="timeout",service="release"} 1
e31_handler_errors_total{reason="transient",service="release"} 1
# HELP e31_poison_total Events a service moved to the poison stream since the process started.
# TYPE e31_poison_total counter
e31_poison_total{service="release"} 1
`
	if err := testutil.CollectAndCompare(h, strings.NewReader(want), "e31_handler_errors_total", "e31_poison_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(h, "e31_handler_seconds"); n != 1 {
		t.Errorf("%d handler histograms, want 1", n)
	}
	if problems, err := testutil.CollectAndLint(h); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestLedgerMends: both kinds are reported from the start, at 0, so that
// an alert on an increase sees the first mend; each count adds up.
func TestLedgerMends(t *testing.T) {
	t.Parallel()
	l := metrics.NewLedger()
	head := `
# HELP e31_ledger_mended_total Records the ledger's fold mended since the process started: an entry of its bucket past the checkpoint beside it, made again from the log (entry_ahead), or an event given again for a record that held it, skipped (event_held).
# TYPE e31_ledger_mended_total counter
`
	if err := testutil.CollectAndCompare(l, strings.NewReader(head+`e31_ledger_mended_total{kind="entry_ahead"} 0
e31_ledger_mended_total{kind="event_held"} 0
`), "e31_ledger_mended_total"); err != nil {
		t.Errorf("before any mend: %v", err)
	}
	l.MadeAgain(89)
	l.MadeAgain(1)
	l.HeldAlready(2)
	if err := testutil.CollectAndCompare(l, strings.NewReader(head+`e31_ledger_mended_total{kind="entry_ahead"} 90
e31_ledger_mended_total{kind="event_held"} 2
`), "e31_ledger_mended_total"); err != nil {
		t.Errorf("after mends: %v", err)
	}
	// Not a mend: a node's word set aside, counted apart, at 0 from the
	// start too.
	l.SetAside(3)
	if err := testutil.CollectAndCompare(l, strings.NewReader(`
# HELP e31_ledger_node_events_set_aside_total Starts and stops the ledger's fold set aside since the process started because a node other than the one their attempt was held on published them: a node that speaks for jobs it does not hold.
# TYPE e31_ledger_node_events_set_aside_total counter
e31_ledger_node_events_set_aside_total 3
`), "e31_ledger_node_events_set_aside_total"); err != nil {
		t.Errorf("after set asides: %v", err)
	}
	if problems, err := testutil.CollectAndLint(l); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestScheduler(t *testing.T) {
	t.Parallel()
	s := metrics.NewScheduler()
	s.Leading(true)
	s.Decided(2 * time.Millisecond)
	s.Waiting(map[string]int{"alice": 3, "bob": 1})
	s.Waiting(map[string]int{"alice": 2}) // bob's jobs were all held
	want := `
# HELP e31_scheduler_leader 1 on the scheduler instance that decides, 0 on a standby.
# TYPE e31_scheduler_leader gauge
e31_scheduler_leader 1
# HELP e31_scheduler_queue_depth Jobs waiting for compute, by submitter, as this instance's scheduler sees them.
# TYPE e31_scheduler_queue_depth gauge
e31_scheduler_queue_depth{submitter="alice"} 2
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "e31_scheduler_leader", "e31_scheduler_queue_depth"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(s); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestConsumingReplacesWhatTheHandlerReadBefore: a follower that reads
// under another name while the server of its own is down is asked about
// by the name it reads now, not by both: the server answers nothing about
// the one it left, and the lag would be an error on every scrape.
func TestConsumingReplacesWhatTheHandlerReadBefore(t *testing.T) {
	t.Parallel()
	h := metrics.NewHandlers()
	h.Consuming("rent", "follow", "E31", "rent-rent-1")
	h.Consuming("ledger", "follow", "E31", "ledger-ledger-1")
	h.Consuming("rent", "follow", "E31", "rent-rent-1-x7")
	var names []string
	for _, c := range h.Consumers() {
		names = append(names, c.Service+" "+c.Name)
	}
	if got, want := strings.Join(names, ", "), "ledger ledger-ledger-1, rent rent-rent-1-x7"; got != want {
		t.Errorf("consumers asked about: %s, want %s", got, want)
	}
}
