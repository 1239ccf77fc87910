package wire_test

import (
	"testing"

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
