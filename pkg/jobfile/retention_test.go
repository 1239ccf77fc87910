package jobfile

import (
	"strings"
	"testing"
)

func TestRetention(t *testing.T) {
	t.Parallel()
	const job = "work: {command: [x]}\nrequest: {limit: 1m}\n"
	for _, tc := range []struct {
		line    string
		seconds float64
		problem string
	}{
		{"", 0, ""}, // the default applies, and the spec says nothing
		{"retention: 14d\n", 14 * 86400, ""},
		{"retention: 90m\n", 5400, ""},
		{"retention: 1m\n", 60, ""},
		{"retention: 365d\n", 365 * 86400, ""},
		{"retention: 30s\n", 0, "job.yaml:3:12: retention: must be at least 1m0s, got 30s"},
		{"retention: 366d\n", 0, "job.yaml:3:12: retention: must be at most 365d, got 366d"},
		{"retention: forever\n", 0, `job.yaml:3:12: retention: "forever" is not a duration`},
		{"retention: 7\n", 0, "job.yaml:3:12: retention: must be at least 1m0s, got 7s"},
	} {
		j, err := Parse("job.yaml", []byte(job+tc.line), dir)
		if tc.problem != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.problem) {
				t.Errorf("%q: error %v, want %s", tc.line, err, tc.problem)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if j.Spec.RetentionSeconds != tc.seconds {
			t.Errorf("%q: retention %gs, want %gs", tc.line, j.Spec.RetentionSeconds, tc.seconds)
		}
		// What the file allows, SUBMIT accepts.
		s := staged()
		s.RetentionSeconds = j.Spec.RetentionSeconds
		if err := Validate(s); err != nil {
			t.Errorf("%q: Validate: %v", tc.line, err)
		}
	}
	s := staged()
	s.RetentionSeconds = 1
	if err := Validate(s); err == nil || !strings.Contains(err.Error(), "retention_seconds: must be at least 1m0s, got 1s") {
		t.Errorf("Validate(1s retention) = %v", err)
	}
}
