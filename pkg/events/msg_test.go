package events_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// TestMsgBodyIsEncodingJSON checks that the body Msg writes is, byte for
// byte, what encoding/json writes for every golden event: Msg encodes with
// goccy/go-json for speed, and the log must not change with the encoder.
func TestMsgBodyIsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, ceType := range sortedTypes() {
		t.Run(ceType, func(t *testing.T) {
			t.Parallel()
			env, err := events.Decode(goldenSubjects[ceType], goldenHeaders(ceType), readGolden(t, ceType))
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(env.Event)
			if err != nil {
				t.Fatal(err)
			}
			m, err := events.New(env.Subject, env.Event, "e31/test", time.Now()).Msg()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Data, want) {
				t.Errorf("Msg wrote\n%s\nencoding/json writes\n%s", m.Data, want)
			}
		})
	}
}

// TestMsgBodyEscapesAsEncodingJSON checks the strings a submitter chooses
// (names, commands, environment) with what encoding/json escapes: HTML
// characters, control characters, line separators, invalid UTF-8.
func TestMsgBodyEscapesAsEncodingJSON(t *testing.T) {
	t.Parallel()
	odd := []string{"<b>&amp;</b>", "tab\there\nnl\x00\x1f", "\u2028\u2029", "bad \xff\xfe utf-8", "quote \" back \\ slash", "émoji 😀", ""}
	for _, s := range odd {
		ev := &events.JobSubmitted{Submitter: "alice", Spec: events.JobSpec{Name: s, Work: events.Work{Command: []string{s, "x"}, Env: map[string]string{"K": s, "A": "1"}},
			Request: events.Request{CPU: 0.1 + 0.2, MemoryBytes: 1 << 40, LimitSeconds: 1e21}}}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		m, err := events.New("job-1", ev, "e31/test", time.Now()).Msg()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Data, want) {
			t.Errorf("%q: Msg wrote\n%s\nencoding/json writes\n%s", s, m.Data, want)
		}
	}
}
