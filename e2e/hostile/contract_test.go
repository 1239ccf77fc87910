package hostile_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// schemaDir is e31's published contract, read as any outside system would.
const schemaDir = "../../pkg/events/schema"

// testdataDir holds the contract's example body of every event type.
const testdataDir = "../../pkg/events/testdata"

// eventKind is one event type as envelope.json describes it: its ce-type
// and the NATS subject it is stored under.
type eventKind struct {
	// ceType is the versioned type, e.g. e31.job.submitted.v1.
	ceType string
	// subject is the template from x-e31-subject, e.g.
	// e31.job.{ce-subject}.held.{node}.
	subject string
}

// subjectFor fills in the template: {ce-subject} is the job (or node) the
// event is about; {node}, {submitter} and {by} are the body's fields of
// that name.
func (k eventKind) subjectFor(about, node, user string) string {
	return strings.NewReplacer("{ce-subject}", about, "{node}", node, "{submitter}", user, "{by}", user).Replace(k.subject)
}

// token is the subject's fourth token, which names the kind of event:
// "held" for e31.job.{ce-subject}.held.{node}.
func (k eventKind) token() string {
	parts := strings.Split(k.subject, ".")
	if len(parts) < 4 {
		return ""
	}
	return parts[3]
}

// kinds reads every event type and where it is stored from envelope.json.
func kinds(t testing.TB) []eventKind {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(schemaDir, "envelope.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		AllOf []struct {
			Subject string `json:"x-e31-subject"`
			If      struct {
				Properties struct {
					Type struct {
						Const string `json:"const"`
					} `json:"ce-type"`
				} `json:"properties"`
			} `json:"if"`
		} `json:"allOf"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("envelope.json: %v", err)
	}
	var out []eventKind
	for _, rule := range env.AllOf {
		if rule.Subject != "" && rule.If.Properties.Type.Const != "" {
			out = append(out, eventKind{ceType: rule.If.Properties.Type.Const, subject: rule.Subject})
		}
	}
	if len(out) < 10 {
		t.Fatalf("envelope.json names only %d event types", len(out))
	}
	return out
}

// kindOf is the event type whose template has ceType.
func kindOf(t testing.TB, ceType string) eventKind {
	t.Helper()
	for _, k := range kinds(t) {
		if k.ceType == ceType {
			return k
		}
	}
	t.Fatalf("envelope.json has no event type %s", ceType)
	return eventKind{}
}

// example is the contract's example body of ceType, from testdata.
func example(t testing.TB, ceType string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdataDir, ceType+".json"))
	if err != nil {
		t.Fatalf("the contract's example of %s: %v", ceType, err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("the contract's example of %s: %v", ceType, err)
	}
	return v
}

// Event types a submitter publishes, by the README.
const (
	typeRequested = "e31.job.requested.v1"
	typeCancel    = "e31.job.cancel_requested.v1"
	typeDelete    = "e31.job.delete_requested.v1"
)

// Event types the services publish, and that a reader of the log watches
// to know how a job ended.
const (
	typeSubmitted = "e31.job.submitted.v1"
	typeRejected  = "e31.job.rejected.v1"
	typeHeld      = "e31.job.held.v1"
	typeStarted   = "e31.job.started.v1"
	typeStopped   = "e31.job.stopped.v1"
	typeReturned  = "e31.job.returned.v1"
	typeReleased  = "e31.job.released.v1"
	typeCancelled = "e31.job.cancelled.v1"
)

// headers are the CloudEvents headers envelope.json asks for, with id as
// ce-id and Nats-Msg-Id.
func headers(ceType, about, id string) map[string]string {
	return map[string]string{
		"ce-specversion": "1.0",
		"ce-type":        ceType,
		"ce-subject":     about,
		"ce-id":          id,
		"Nats-Msg-Id":    id,
		"ce-source":      "urn:example:mallory",
		"ce-time":        time.Now().UTC().Format(time.RFC3339Nano),
		"content-type":   "application/json",
	}
}

// spec is a job declaration as JobRequested carries it (defs.json's
// JobSpec): a shell command, a small request, and the output it returns.
func spec(name, script string, cpu float64, limit time.Duration) map[string]any {
	return map[string]any{
		"name": name,
		"work": map[string]any{"command": []string{"/bin/sh", "-c", script}},
		"request": map[string]any{"cpu": cpu, "memory_bytes": 64 << 20, "gpu": 0, "disk_bytes": 4 << 20,
			"limit_seconds": int(limit.Seconds())},
		"output": []map[string]any{{"path": "out.txt", "required": true}},
	}
}

// mustJSON is v as JSON.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return b
}
