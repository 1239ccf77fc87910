package hostile_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tenant is a submitter with nothing but its credentials and a plain NATS
// client: what mallory has.
type tenant struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	// inbox is the prefix its permissions let it subscribe under.
	inbox string

	mu sync.Mutex
	// refusals are what the server told the connection asynchronously:
	// a publish or subscription it refused.
	refusals []error
}

// newTenant connects as the submitter name.
func newTenant(t testing.TB, name string) *tenant {
	t.Helper()
	m := &tenant{name: name}
	m.nc = connect(t, name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.refusals = append(m.refusals, err)
	}))
	var err error
	if m.js, err = jetstream.New(m.nc); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(creds(name))
	if err != nil {
		t.Fatal(err)
	}
	m.inbox = inboxPrefix(t, b)
	return m
}

// takeRefusals returns, and forgets, what the server refused the tenant
// since the last call.
func (m *tenant) takeRefusals() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.refusals
	m.refusals = nil
	return r
}

// newID is a job id of the tenant's choosing (pkg/events/schema: letters,
// digits, '-' and '_', at most 64), unguessable like the CLI's.
func newID(label string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("m-%s-%s", label, hex.EncodeToString(b))
}

// api is the subject of one of the tenant's query endpoints,
// e31.api.<name>.<service>.<endpoint>.
func (m *tenant) api(endpoint string) string { return "e31.api." + m.name + "." + endpoint }

// publish stores one message in the log through JetStream, with the
// headers given, and reports what the server said.
func (m *tenant) publish(subject string, header map[string]string, data []byte, opts ...jetstream.PublishOpt) error {
	msg := nats.NewMsg(subject)
	msg.Data = data
	for k, v := range header {
		msg.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := m.js.PublishMsg(ctx, msg, opts...)
	return err
}

// submit requests a job the way pkg/events/schema/README.md shows: a
// JobRequested on e31.job.<job>.requested.<name>, stored only if the job
// has no events yet. It returns the job id at once.
func (m *tenant) submit(t testing.TB, label string, spec map[string]any) string {
	t.Helper()
	id := newID(label)
	body := mustJSON(map[string]any{"submitter": m.name, "spec": spec})
	subject := kindOf(t, typeRequested).subjectFor(id, "", m.name)
	if err := m.publish(subject, headers(typeRequested, id, id+"/requested"), body,
		jetstream.WithExpectLastSequenceForSubject(0, "e31.job."+id+".>")); err != nil {
		t.Fatalf("%s: request %s: %v", m.name, id, err)
	}
	return id
}

// cancel asks for the tenant's own job to be stopped, as the README says.
func (m *tenant) cancel(t testing.TB, job string) {
	t.Helper()
	body := mustJSON(map[string]any{"by": m.name, "reason": "the test is done with it"})
	subject := kindOf(t, typeCancel).subjectFor(job, "", m.name)
	if err := m.publish(subject, headers(typeCancel, job, job+"/cancel"), body); err != nil {
		t.Errorf("%s: cancel %s: %v", m.name, job, err)
	}
}

// errBusy is an answer with "code": "busy": the endpoint is at a limit
// for this asker.
var errBusy = errors.New("busy")

// ask sends one query to the tenant's endpoint and decodes the answer
// into reply. A busy answer is errBusy.
func (m *tenant) ask(endpoint string, q any, reply any, timeout time.Duration) error {
	msg, err := m.nc.Request(m.api(endpoint), mustJSON(q), timeout)
	if err != nil {
		return err
	}
	if code(msg.Data) == "busy" {
		return errBusy
	}
	if reply == nil {
		return nil
	}
	return json.Unmarshal(msg.Data, reply)
}

// askPatiently asks again while the endpoint says it is busy, as a
// well-behaved client does.
func (m *tenant) askPatiently(endpoint string, q any, reply any) error {
	var err error
	for delay := 100 * time.Millisecond; delay < 5*time.Second; delay *= 2 {
		if err = m.ask(endpoint, q, reply, 10*time.Second); !errors.Is(err, errBusy) {
			return err
		}
		time.Sleep(delay) // the busy answer says to retry later
	}
	return err
}

// code is the "code" field of a JSON answer, if it has one.
func code(data []byte) string {
	var a struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(data, &a)
	return a.Code
}

// quick is a job that succeeds at once.
func quick(name string) map[string]any {
	return spec(name, `echo ok > "$E31_OUTPUT/out.txt"`, 0.1, time.Minute)
}

// stuck is a job that waits for a node far bigger than any in the pool,
// and so stays queued until it is cancelled.
func stuck(name string) map[string]any {
	s := quick(name)
	s["request"].(map[string]any)["cpu"] = 64
	s["wait_for_node"] = true
	return s
}

// accepted waits until SUBMIT answered the request of job, and returns
// "" if it was accepted or the rejection's reason.
func accepted(t testing.TB, w *watcher, job string) (string, bool) {
	t.Helper()
	evs, ok := w.waitFor(t, job, 30*time.Second, func(evs []stored) bool {
		return has(typeSubmitted)(evs) || strings.HasPrefix(ending(evs), "rejected")
	})
	if !ok {
		t.Fatalf("mallory's job %s was neither accepted nor rejected within 30 s: %s", job, journey(evs))
	}
	if end := ending(evs); strings.HasPrefix(end, "rejected") {
		return strings.TrimPrefix(end, "rejected: "), false
	}
	return "", true
}
