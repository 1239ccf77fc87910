package compromised_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The names a node's side of e31 is known by: the log, the nodes' leases
// bucket (SECURITY.md), and the node gate's subjects, headers and its
// consumer names (pkg/gate).
const (
	logStream        = "E31"
	leasesBucket     = "E31_LEASES"
	nodeLeasesBucket = "E31_NODE_LEASES"
	gateError        = "E31-Gate-Error"
	gatePart         = "E31-Gate-Part"
	gateEnd          = "E31-Gate-End"
)

// heldConsumer is the durable consumer of a node's holds, by the name the
// gate makes it under: its durable ("run-<node>") and its filter, dots as
// dashes, '*' as "any".
func heldConsumer(node string) (name, filter string) {
	return "run-" + node + "_e31-job-any-held-" + node, "e31.job.*.held." + node
}

// rogueNode is the compromised node: its credentials and a plain client,
// doing what a node does (its lease, its announcement, its holds) and
// whatever else its credentials let it.
type rogueNode struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	boot string
	cons jetstream.Consumer
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// newRogue joins the pool as the rogue: a lease kept every two seconds, an
// announcement of a node too small for honest's jobs that runs only those
// that name an image, and its consumer of holds, made by the gate.
func newRogue(t *testing.T) *rogueNode {
	t.Helper()
	r := &rogueNode{nc: connect(t, rogue)}
	var err error
	if r.js, err = jetstream.New(r.nc); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	r.boot = hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := r.js.KeyValue(ctx, nodeLeasesBucket)
	if err != nil {
		t.Fatalf("rogue: its lease bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "node."+rogue, []byte(r.boot)); err != nil {
		t.Fatalf("rogue: its lease: %v", err)
	}
	kctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-tick.C:
				pctx, cancel := context.WithTimeout(kctx, 5*time.Second)
				_, _ = kv.Put(pctx, "node."+rogue, []byte(r.boot))
				cancel()
			}
		}
	}()
	t.Cleanup(func() { r.stop(); r.wg.Wait() })
	card, err := rogueCard()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.event(ctx, "e31.node."+rogue+".announced", "e31.node.announced.v1", rogue, rogue+"/announced/"+r.boot, map[string]any{
		"node": rogue, "boot": r.boot, "cpu": 0.1, "memory_bytes": 32 << 20, "gpu": 0, "disk_bytes": 1 << 30,
		"labels": map[string]string{"containers": "true"}, "isolation": "container", "card": card,
	}); err != nil {
		t.Fatalf("rogue: announce itself: %v", err)
	}
	name, filter := heldConsumer(rogue)
	if err := r.makeConsumer(ctx, map[string]any{"durable_name": name, "filter_subject": filter, "ack_policy": "explicit",
		"max_ack_pending": 100, "ack_wait": int64(30 * time.Second), "deliver_policy": "all"}); err != nil {
		t.Fatalf("rogue: its consumer of holds: %v", err)
	}
	if r.cons, err = r.js.Consumer(ctx, logStream, name); err != nil {
		t.Fatalf("rogue: its consumer of holds: %v", err)
	}
	return r
}

// event publishes an event as the schemas' README says, and waits for the
// log's acknowledgement.
func (r *rogueNode) event(ctx context.Context, subject, ceType, about, id string, body any, extra ...string) (*jetstream.PubAck, error) {
	m, err := eventMsg(subject, ceType, about, id, body)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m.Header.Set(extra[i], extra[i+1])
	}
	return r.js.PublishMsg(ctx, m)
}

func eventMsg(subject, ceType, about, id string, body any) (*nats.Msg, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Header.Set("ce-specversion", "1.0")
	m.Header.Set("ce-type", ceType)
	m.Header.Set("ce-subject", about)
	m.Header.Set("ce-id", id)
	m.Header.Set("Nats-Msg-Id", id)
	m.Header.Set("ce-source", "urn:rogue")
	m.Header.Set("ce-time", time.Now().UTC().Format(time.RFC3339Nano))
	m.Header.Set("content-type", "application/json")
	m.Data = b
	return m, nil
}

// refused publishes on subject and reports whether the server refused it
// for want of permission.
func (r *rogueNode) refused(t testing.TB, subject string, data []byte) bool {
	t.Helper()
	if err := r.nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	err := r.nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`)
}

// gateErr is the error a gate reply says, nil if none.
func gateErr(m *nats.Msg) error {
	if code := m.Header.Get(gateError); code != "" {
		return fmt.Errorf("gate: %s: %s", code, m.Data)
	}
	if m.Header.Get("Status") == "503" {
		return nats.ErrNoResponders
	}
	return nil
}

// ask asks the gate op and returns its one answer.
func (r *rogueNode) ask(ctx context.Context, op string, body any) (*nats.Msg, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	m, err := r.nc.RequestWithContext(ctx, "e31.gate."+rogue+"."+op, b)
	if err != nil {
		return nil, err
	}
	return m, gateErr(m)
}

// makeConsumer asks the gate to make a consumer of the config given.
func (r *rogueNode) makeConsumer(ctx context.Context, cfg map[string]any) error {
	_, err := r.ask(ctx, "consumer", cfg)
	return err
}

// request is a gate request about an object of an attempt: its fields
// in headers, as pkg/gate says.
func request(subject, job string, attempt int, name string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set("E31-Gate-Job", job)
	m.Header.Set("E31-Gate-Attempt", strconv.Itoa(attempt))
	m.Header.Set("E31-Gate-Object", name)
	return m
}

// get reads an object of an attempt's store through the gate.
func (r *rogueNode) get(ctx context.Context, job string, attempt int, name string) ([]byte, error) {
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }() // closing the connection ends it too
	m := request("e31.gate."+rogue+".get", job, attempt, name)
	m.Reply = inbox
	if err := r.nc.PublishMsg(m); err != nil {
		return nil, err
	}
	var out []byte
	for part := 0; ; part++ {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return out, err
		}
		if err := gateErr(m); err != nil {
			return out, err
		}
		if m.Header.Get(gateEnd) != "" {
			return out, nil
		}
		if m.Header.Get(gatePart) != strconv.Itoa(part) {
			return out, fmt.Errorf("piece %q where %d was due", m.Header.Get(gatePart), part)
		}
		out = append(out, m.Data...)
	}
}

// put stores content, in one piece, under a content-addressed name of an
// attempt's store through the gate, and returns the name and digest.
func (r *rogueNode) put(ctx context.Context, job string, attempt int, content []byte) (name, digest string, err error) {
	sum := sha256.Sum256(content)
	name, digest = "blob/sha256/"+hex.EncodeToString(sum[:]), "sha256:"+hex.EncodeToString(sum[:])
	m := request("e31.gate."+rogue+".put", job, attempt, name)
	m.Header.Set("E31-Gate-Digest", digest)
	m.Header.Set("E31-Gate-Size", strconv.Itoa(len(content)))
	m.Header.Set(gatePart, "0")
	m.Header.Set(gateEnd, "1")
	m.Data = content
	answer, err := r.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return name, digest, err
	}
	return name, digest, gateErr(answer)
}

// held is a hold as a node reads it: the hold's fields (its body, which
// events of the attempt carry) and the spec.
type held struct {
	Attempt     int     `json:"attempt"`
	Node        string  `json:"node"`
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	GPU         int     `json:"gpu"`
	DiskBytes   int64   `json:"disk_bytes"`
	Submitter   string  `json:"submitter"`
	Spec        struct {
		Data []struct {
			Name   string `json:"name"`
			Digest string `json:"digest"`
		} `json:"data"`
	} `json:"spec"`
}

// hold is the part of a held event every later event of its attempt
// carries (pkg/events/schema/defs.json, Hold), as the node names it.
func (h held) hold(node string) map[string]any {
	return map[string]any{"attempt": h.Attempt, "node": node, "cpu": h.CPU, "memory_bytes": h.MemoryBytes, "gpu": h.GPU, "disk_bytes": h.DiskBytes}
}

// readHold reads the hold of job on node from the log, as any node may.
func (r *rogueNode) readHold(ctx context.Context, job, node string) (held, error) {
	st, err := r.js.Stream(ctx, logStream)
	if err != nil {
		return held{}, err
	}
	m, err := st.GetLastMsgForSubject(ctx, "e31.job."+job+".held."+node)
	if err != nil {
		return held{}, err
	}
	var h held
	return h, json.Unmarshal(m.Data, &h)
}

// nextHold pulls the next hold on the rogue, its job and the hold.
func (r *rogueNode) nextHold(ctx context.Context) (string, held, error) {
	for ctx.Err() == nil {
		batch, err := r.cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return "", held{}, err
		}
		for m := range batch.Messages() {
			var h held
			if err := json.Unmarshal(m.Data(), &h); err != nil {
				return "", held{}, err
			}
			if err := m.Ack(); err != nil {
				return "", held{}, err
			}
			return m.Headers().Get("ce-subject"), h, nil
		}
	}
	return "", held{}, ctx.Err()
}
