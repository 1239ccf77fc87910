package executor

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// watched is a job that Watch stops: it records the signals, and exits at
// SIGKILL, or at SIGTERM if it heeds it.
type watched struct {
	heedsTerm bool
	exited    chan int
	signals   []string
	why       []Stop
	at        []time.Duration // since start, of each signal
	start     time.Time
}

func newWatched(heedsTerm bool) *watched {
	return &watched{heedsTerm: heedsTerm, exited: make(chan int, 1), start: time.Now()}
}

func (w *watched) sig() Signals {
	return Signals{
		Term: func(why Stop) {
			w.signals, w.why, w.at = append(w.signals, "TERM"), append(w.why, why), append(w.at, time.Since(w.start))
			if w.heedsTerm {
				w.exited <- 143
			}
		},
		Kill: func() {
			w.signals, w.at = append(w.signals, "KILL"), append(w.at, time.Since(w.start))
			select {
			case w.exited <- 137:
			default:
			}
		},
	}
}

// Every executor stops a job the same way, by Watch: nothing for a job
// that ends by itself; SIGTERM a grace before its limit and SIGKILL at
// it; on a cancel SIGTERM, then SIGKILL a grace later.
func TestWatchStopsAJobAtItsLimitOrOnACancel(t *testing.T) {
	t.Parallel()
	t.Run("ends by itself", func(t *testing.T) {
		t.Parallel()
		w := newWatched(false)
		w.exited <- 0
		code, stop, err := Watch(context.Background(), Spec{Limit: time.Minute, Grace: time.Second}, w.start, w.exited, nil, w.sig())
		if code != 0 || stop != (Stop{}) || err != nil || len(w.signals) > 0 {
			t.Errorf("code %d, stop %+v, err %v, signals %v", code, stop, err, w.signals)
		}
	})
	t.Run("ignores SIGTERM past its limit", func(t *testing.T) {
		t.Parallel()
		w := newWatched(false)
		spec := Spec{Limit: 300 * time.Millisecond, Grace: 100 * time.Millisecond}
		code, stop, err := Watch(context.Background(), spec, w.start, w.exited, nil, w.sig())
		want := Stop{Outcome: events.LimitExceeded, Reason: "ran past its limit of 300ms"}
		if code != 137 || stop != want || err != nil || !slices.Equal(w.signals, []string{"TERM", "KILL"}) {
			t.Fatalf("code %d, stop %+v, err %v, signals %v", code, stop, err, w.signals)
		}
		if w.why[0] != want || w.at[0] < 200*time.Millisecond || w.at[1] < 300*time.Millisecond {
			t.Errorf("SIGTERM for %+v at %s, SIGKILL at %s: want the limit's, at 200ms and 300ms", w.why[0], w.at[0], w.at[1])
		}
	})
	t.Run("heeds SIGTERM on a cancel", func(t *testing.T) {
		t.Parallel()
		w := newWatched(true)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code, stop, err := Watch(ctx, Spec{Limit: time.Minute, Grace: time.Second}, w.start, w.exited, nil, w.sig())
		want := Stop{Outcome: events.Cancelled, Reason: "cancelled"}
		if code != 143 || stop != want || err != nil || !slices.Equal(w.signals, []string{"TERM"}) {
			t.Errorf("code %d, stop %+v, err %v, signals %v", code, stop, err, w.signals)
		}
	})
	t.Run("ignores SIGTERM on a cancel", func(t *testing.T) {
		t.Parallel()
		w := newWatched(false)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code, stop, err := Watch(ctx, Spec{Limit: time.Minute, Grace: 200 * time.Millisecond}, w.start, w.exited, nil, w.sig())
		if code != 137 || stop.Outcome != events.Cancelled || err != nil || !slices.Equal(w.signals, []string{"TERM", "KILL"}) {
			t.Fatalf("code %d, stop %+v, err %v, signals %v", code, stop, err, w.signals)
		}
		if d := w.at[1] - w.at[0]; d < 200*time.Millisecond || d > 10*time.Second {
			t.Errorf("SIGKILL %s after SIGTERM, want the grace of 200ms", d)
		}
	})
	t.Run("watching fails", func(t *testing.T) {
		t.Parallel()
		w := newWatched(false)
		failed := make(chan error, 1)
		failed <- errors.New("engine gone")
		_, _, err := Watch(context.Background(), Spec{Limit: time.Minute}, w.start, w.exited, failed, w.sig())
		if err == nil || err.Error() != "engine gone" {
			t.Errorf("err %v, want the engine's", err)
		}
	})
}
