package wire_test

import (
	"testing"
	"time"

	"github.com/e31net/e31/pkg/query/wire"
)

func TestQuerySubjects(t *testing.T) {
	t.Parallel()
	tests := []struct{ subject, user, service string }{
		{wire.LedgerSubject("alice", wire.EndpointRecord), "alice", "ledger"},
		{wire.RentWhySubject("bob"), "bob", "rent"},
		{wire.OutputStoredSubject("carol"), "carol", "output"},
		{"e31.api.dave", "", ""},
		{"e31.job.x.submitted", "", ""},
	}
	for _, tt := range tests {
		if got := wire.UserOf(tt.subject); got != tt.user {
			t.Errorf("UserOf(%q) = %q, want %q", tt.subject, got, tt.user)
		}
		if got := wire.ServiceOf(tt.subject); got != tt.service {
			t.Errorf("ServiceOf(%q) = %q, want %q", tt.subject, got, tt.service)
		}
	}
}

// A request is held DefaultWait when it says nothing, as long as it asks
// up to MaxWait, and no longer: the ledger holds it that long, and the
// client waits for the answer that long and a margin.
func TestWaitOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ wait, want time.Duration }{
		{0, wire.DefaultWait}, {-time.Second, wire.DefaultWait}, {time.Second, time.Second},
		{wire.MaxWait, wire.MaxWait}, {time.Hour, wire.MaxWait},
	} {
		if got := wire.WaitOf(tt.wait); got != tt.want {
			t.Errorf("WaitOf(%s) = %s, want %s", tt.wait, got, tt.want)
		}
	}
}
