package events_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// idPattern is the rule ValidID implements by hand, as a regular
// expression to hold it against.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

func TestValidIDIsOneSubjectToken(t *testing.T) {
	for _, id := range []string{"", "a", "job-1", "Job_2", "-x", "_x", "a.b", "a b", "a*", "a>", "é", "0",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "x\x00", "01a2390a-4a88-7a26-853b-d8c032c79246"} {
		if got, want := events.ValidID(id), idPattern.MatchString(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

func FuzzValidID(f *testing.F) {
	f.Add("job-1")
	f.Add("-a.b")
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := events.ValidID(id), idPattern.MatchString(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	})
}
