package compromised_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestCompromisedNode runs every attack of issue 31 that a node's
// credentials can make, in turn, against one e31, while honest's jobs run
// on node-1; each attack ends with its aftermath. They share the system on
// purpose: what one attack left behind would show in the next.
func TestCompromisedNode(t *testing.T) {
	s := &suite{w: newWatcher(t)}
	// node-1 first: a rogue announced alone, too small for honest's
	// jobs, has SUBMIT reject them as fitting no node.
	waitAnnounced(t, node1)
	s.r = newRogue(t)
	warm := submitHonest(t, "warm-up", 0, "")
	if rec, r := warm.wait(t); rec.Outcome != "succeeded" || rec.Node != node1 {
		t.Fatalf("honest's first job, before any attack: %s on %s: %s", rec.Outcome, rec.Node, r)
	}
	s.leases = s.w.leaseValues(t)
	if s.leases["node."+node1] == "" || s.leases["node."+rogue] == "" || !hasPrefix(s.leases, "leader.") {
		t.Fatalf("the leases before the attacks: %v; want node-1's, the rogue's and the leader's", s.leases)
	}

	t.Run("stop", s.stop)
	t.Run("start", s.start)
	t.Run("lease", s.lease)
	t.Run("rollup and purge", s.rollupAndPurge)
	t.Run("data", s.data)
	t.Run("streams", s.streams)
	t.Run("consumers", s.consumers)
	t.Run("replies", s.replies)
}

// waitAnnounced waits until node has announced itself in the log.
func waitAnnounced(t *testing.T, node string) {
	t.Helper()
	js, err := jetstream.New(connect(t, operator))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	for {
		st, err := js.Stream(ctx, logStream)
		if err == nil {
			if _, err = st.GetLastMsgForSubject(ctx, "e31.node."+node+".announced"); err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never announced itself: %v", node, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// suite is what the attacks share.
type suite struct {
	w *watcher
	r *rogueNode
	// leases are the leases before the attacks: who holds each.
	leases map[string]string
}

func hasPrefix(m map[string]string, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// running submits an honest job that runs for a while and waits until
// node-1 started it; it returns the job and its hold as the log has it.
func (s *suite) running(t *testing.T, name string) (honestJob, held) {
	t.Helper()
	j := submitHonest(t, name, 6*time.Second, "")
	if evs, ok := s.w.waitFor(t, j.id, 30*time.Second, has(".started."+node1)); !ok {
		t.Fatalf("%s never started on %s: %s", name, node1, journey(evs))
	}
	h, err := s.r.readHold(ctxFor(t, 10*time.Second), j.id, node1)
	if err != nil {
		t.Fatalf("rogue: read the hold of %s: %v", j.id, err)
	}
	return j, h
}

// stop: stops of honest's running job under the rogue's own name, with
// the ids node-1's stop will have (node_lost, so that it is held again;
// failed with a day of cpu and the rogue's own bytes named as its output),
// and under node-1's name and the subject from before nodes were named.
func (s *suite) stop(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	j, h := s.running(t, "victim-stop")
	zero := 0
	lost := map[string]any{"outcome": "node_lost", "reason": "forged", "usage": map[string]any{"cpu_seconds": 86400, "max_rss_bytes": 1},
		"output": map[string]any{"files": []any{}, "missing": []string{}, "bytes": 0}}
	mine := h.hold(rogue)
	for k, v := range lost {
		mine[k] = v
	}
	id := j.id + "/stopped/1"
	if _, err := s.r.event(ctx, "e31.job."+j.id+".stopped."+rogue, "e31.job.stopped.v1", j.id, id, mine); err != nil {
		t.Errorf("rogue: a stop of honest's job under its own name was not even stored: %v", err)
	}
	// Its own bytes, named as the output: stored where the gate lets it
	// (nowhere: it holds nothing of the job), named anyway.
	failed := h.hold(rogue)
	for k, v := range map[string]any{"outcome": "failed", "exit_code": &zero, "usage": map[string]any{"cpu_seconds": 86400, "max_rss_bytes": 1},
		"output": map[string]any{"files": []map[string]any{{"path": "out.txt", "bytes": 5, "digest": "sha256:" + strings.Repeat("ab", 32)}}, "missing": []string{}, "bytes": 5}} {
		failed[k] = v
	}
	if _, err := s.r.event(ctx, "e31.job."+j.id+".stopped."+rogue, "e31.job.stopped.v1", j.id, id+"x", failed); err != nil {
		t.Errorf("rogue: %v", err)
	}
	// The hold as node-1's, on the rogue's subject: not even an event.
	asNode1 := h.hold(node1)
	for k, v := range lost {
		asNode1[k] = v
	}
	if _, err := s.r.event(ctx, "e31.job."+j.id+".stopped."+rogue, "e31.job.stopped.v1", j.id, id, asNode1); err != nil {
		t.Errorf("rogue: %v", err)
	}
	for _, subject := range []string{"e31.job." + j.id + ".stopped." + node1, "e31.job." + j.id + ".stopped"} {
		m, err := eventMsg(subject, "e31.job.stopped.v1", j.id, id, asNode1)
		if err != nil {
			t.Fatal(err)
		}
		if !s.r.refused(t, subject, m.Data) {
			t.Errorf("rogue may publish on %s", subject)
		}
	}
	s.aftermath(t, "stop", j)
}

// start: a start of honest's job under the rogue's own name, before
// node-1's, with the id node-1's will have; and of a running one.
func (s *suite) start(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	j, h := s.running(t, "victim-start")
	if _, err := s.r.event(ctx, "e31.job."+j.id+".started."+rogue, "e31.job.started.v1", j.id, j.id+"/started/2",
		map[string]any{"attempt": 2, "node": rogue, "cpu": h.CPU, "memory_bytes": h.MemoryBytes, "gpu": 0, "disk_bytes": h.DiskBytes, "isolation": "sandbox"}); err != nil {
		t.Errorf("rogue: %v", err)
	}
	mine := h.hold(rogue)
	mine["isolation"] = "none"
	if _, err := s.r.event(ctx, "e31.job."+j.id+".started."+rogue, "e31.job.started.v1", j.id, j.id+"/started/1", mine); err != nil {
		t.Errorf("rogue: %v", err)
	}
	s.aftermath(t, "start", j)
}

// lease: node-1's lease and the leader's, in either bucket.
func (s *suite) lease(t *testing.T) {
	for _, subject := range []string{
		"$KV." + nodeLeasesBucket + ".node." + node1,
		"$KV." + leasesBucket + ".node." + node1,
		"$KV." + leasesBucket + ".node." + rogue,
		"$KV." + leasesBucket + ".leader.rent",
	} {
		if !s.r.refused(t, subject, []byte("rogue")) {
			t.Errorf("rogue may write %s", subject)
		}
	}
	s.aftermath(t, "lease", submitHonest(t, "after-lease", 0, ""))
}

// rollupAndPurge: its own lease with "Nats-Rollup: all", which in the
// leases bucket would purge every lease; purges of every bucket and of
// the log.
func (s *suite) rollupAndPurge(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	m := nats.NewMsg("$KV." + nodeLeasesBucket + ".node." + rogue)
	m.Header.Set("Nats-Rollup", "all")
	m.Data = []byte(s.r.boot)
	if _, err := s.r.js.PublishMsg(ctx, m); err == nil {
		t.Error("rogue: a write of its lease with Nats-Rollup: all was stored")
	}
	for _, stream := range []string{logStream, "KV_" + leasesBucket, "KV_" + nodeLeasesBucket, "KV_E31_LEDGER", "OBJ_E31_DATA_" + honest} {
		if !s.r.refused(t, "$JS.API.STREAM.PURGE."+stream, []byte("{}")) {
			t.Errorf("rogue may purge %s", stream)
		}
	}
	s.aftermath(t, "rollup and purge", submitHonest(t, "after-rollup", 0, ""))
}

// data: honest's running job's input, asked of the gate and read from
// honest's bucket; the bait's input while the rogue holds the bait, and
// once it is over.
func (s *suite) data(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	j, h := s.running(t, "victim-data")
	if len(h.Spec.Data) == 0 {
		t.Fatalf("the hold names no data: %+v", h)
	}
	input := "blob/sha256/" + strings.TrimPrefix(h.Spec.Data[0].Digest, "sha256:")
	if b, err := s.r.get(ctx, j.id, 1, input); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("rogue read honest's input through the gate: %q, %v", b, err)
	}
	for _, subject := range []string{"$JS.API.DIRECT.GET.OBJ_E31_DATA_" + honest, "$JS.API.STREAM.INFO.OBJ_E31_DATA_" + honest,
		"$O.E31_DATA_" + honest + ".M.x", "$JS.API.CONSUMER.CREATE.OBJ_E31_DATA_" + honest} {
		if !s.r.refused(t, subject, []byte("{}")) {
			t.Errorf("rogue may publish on %s", subject)
		}
	}

	// The bait: held on the rogue, which reads its input, stores its
	// output and stops it, as a node does.
	b := submitHonest(t, "bait", 0, bait)
	job, hb, err := s.r.nextHold(ctx)
	if err != nil || job != b.id {
		t.Fatalf("rogue: the bait's hold: %s, %v (want %s)", job, err, b.id)
	}
	baitInput := "blob/sha256/" + strings.TrimPrefix(hb.Spec.Data[0].Digest, "sha256:")
	got, err := s.r.get(ctx, b.id, 1, baitInput)
	if err != nil || !strings.HasPrefix(string(got), "input of bait") {
		t.Fatalf("rogue reads the input of the job it holds: %q, %v", got, err)
	}
	if _, err := s.r.get(ctx, b.id, 1, input); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("rogue read honest's other job's input as the bait's: %v", err)
	}
	if _, err := s.r.event(ctx, "e31.job."+b.id+".started."+rogue, "e31.job.started.v1", b.id, b.id+"/started/1", withIsolation(hb.hold(rogue))); err != nil {
		t.Fatalf("rogue starts the bait: %v", err)
	}
	content := []byte(string(got) + "done\n")
	_, digest, err := s.r.put(ctx, b.id, 1, content)
	if err != nil {
		t.Fatalf("rogue stores the bait's output: %v", err)
	}
	zero := 0
	stop := hb.hold(rogue)
	for k, v := range map[string]any{"outcome": "succeeded", "exit_code": &zero, "usage": map[string]any{"cpu_seconds": 0.01, "max_rss_bytes": 1},
		"output": map[string]any{"files": []map[string]any{{"path": "out.txt", "bytes": len(content), "digest": digest, "mode": "0644"}},
			"missing": []string{}, "bytes": len(content), "declared": []map[string]any{{"path": "out.txt", "required": true}}}} {
		stop[k] = v
	}
	// Signed with its own key, as its card says: the stop of a job held
	// on it is its word, which the audit checks.
	key, err := rogueKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := signStop(b.id, stop, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.r.event(ctx, "e31.job."+b.id+".stopped."+rogue, "e31.job.stopped.v1", b.id, b.id+"/stopped/1", stop); err != nil {
		t.Fatalf("rogue stops the bait: %v", err)
	}
	if rec, r := b.wait(t); rec.Outcome != "succeeded" || rec.Node != rogue {
		t.Fatalf("the bait: %s on %s: %s", rec.Outcome, rec.Node, r)
	}
	// Its hold over, the rogue reads its input no more, nor stores more.
	if got, err := s.r.get(ctx, b.id, 1, baitInput); err == nil || !strings.Contains(err.Error(), "is over") {
		t.Errorf("rogue read the bait's input once released: %q, %v", got, err)
	}
	if _, _, err := s.r.put(ctx, b.id, 1, []byte("more")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("rogue stored into honest's bucket once the bait was released: %v", err)
	}
	s.aftermath(t, "data", j)
}

func withIsolation(h map[string]any) map[string]any {
	h["isolation"] = "container"
	return h
}

// streams: a mirror of the ledger's bucket (every tenant's records), a
// stream capturing what every job writes, a stream capturing holds.
func (s *suite) streams(t *testing.T) {
	for _, c := range []struct{ name, cfg string }{
		{"MIRROR", `{"name":"MIRROR","mirror":{"name":"KV_E31_LEDGER"}}`},
		{"LOGS", `{"name":"LOGS","subjects":["e31.logs.>"]}`},
		{"HOLDS", `{"name":"HOLDS","subjects":["e31.gate.>"]}`},
	} {
		if !s.r.refused(t, "$JS.API.STREAM.CREATE."+c.name, []byte(c.cfg)) {
			t.Errorf("rogue may create stream %s", c.name)
		}
	}
	for _, subject := range []string{"$JS.API.STREAM.UPDATE." + logStream, "$JS.API.STREAM.DELETE.KV_" + nodeLeasesBucket} {
		if !s.r.refused(t, subject, []byte("{}")) {
			t.Errorf("rogue may publish on %s", subject)
		}
	}
	s.aftermath(t, "streams", submitHonest(t, "after-streams", 0, ""))
}

// consumers: OUTPUT's consumer and node-1's read, deleted, made again,
// pulled from; node-1's asked of the gate; a push consumer of its own.
func (s *suite) consumers(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	n1, n1filter := heldConsumer(node1)
	for _, name := range []string{"output_e31-job-any-stopped-any", n1} {
		for _, subject := range []string{
			"$JS.API.CONSUMER.INFO." + logStream + "." + name,
			"$JS.API.CONSUMER.DELETE." + logStream + "." + name,
			"$JS.API.CONSUMER.CREATE." + logStream + "." + name,
			"$JS.API.CONSUMER.DURABLE.CREATE." + logStream + "." + name,
			"$JS.API.CONSUMER.MSG.NEXT." + logStream + "." + name,
		} {
			if !s.r.refused(t, subject, []byte("{}")) {
				t.Errorf("rogue may publish on %s", subject)
			}
		}
	}
	if err := s.r.makeConsumer(ctx, map[string]any{"durable_name": n1, "filter_subject": n1filter, "ack_policy": "explicit", "max_ack_pending": 1}); err == nil {
		t.Error("the gate made node-1's consumer for the rogue")
	}
	mine, filter := heldConsumer(rogue)
	if err := s.r.makeConsumer(ctx, map[string]any{"durable_name": mine, "filter_subject": filter, "ack_policy": "explicit", "max_ack_pending": 1,
		"deliver_subject": "$KV." + leasesBucket + ".node." + node1}); err == nil {
		t.Error("the gate made the rogue a push consumer")
	}
	info, err := s.r.cons.Info(ctx)
	if err != nil || info.Config.DeliverSubject != "" {
		t.Errorf("the rogue's consumer: %+v, %v; want a pull consumer", info, err)
	}
	s.aftermath(t, "consumers", submitHonest(t, "after-consumers", 0, ""))
}

// replies: JetStream's answers aimed at the leases, honest's events and
// objects: the API, the PubAcks of its lease and its own events, the gate.
// They come back into NODES, where nothing stores them.
func (s *suite) replies(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	j, _ := s.running(t, "victim-replies")
	targets := []string{
		"$KV." + leasesBucket + ".node." + node1,
		"$KV." + leasesBucket + ".leader.rent",
		"$KV." + nodeLeasesBucket + ".node." + node1,
		"e31.job." + j.id + ".stopped." + node1,
		"e31.job." + j.id + ".returned",
		"$O.E31_DATA_" + honest + ".C.x",
	}
	sub, err := s.w.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }() // closing the connection ends it too
	if err := s.w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, reply := range targets {
		for _, subject := range []string{"$JS.API.INFO", "$JS.API.STREAM.INFO." + logStream,
			"$KV." + nodeLeasesBucket + ".node." + rogue, "e31.gate." + rogue + ".consumer"} {
			if err := s.r.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: []byte(s.r.boot)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.r.nc.RequestWithContext(ctx, "$JS.API.INFO", nil); err != nil {
		t.Fatalf("rogue: its own request: %v", err)
	}
	if err := s.w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// What lands on a target now is an answer to the rogue, unless it is
	// an event (node-1's stop, OUTPUT's return) or a lease renewed by its
	// holder.
	for {
		m, err := sub.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		if m.Header.Get("ce-type") != "" || strings.HasPrefix(m.Reply, "$JS.ACK.") {
			continue
		}
		for _, target := range targets {
			key := strings.TrimPrefix(strings.TrimPrefix(target, "$KV."+leasesBucket+"."), "$KV."+nodeLeasesBucket+".")
			if m.Subject == target && string(m.Data) != s.leases[key] {
				t.Errorf("an answer to the rogue landed on %s in E31: %s", target, clip(string(m.Data), 200))
			}
		}
	}
	s.aftermath(t, "replies", j)
}

// aftermath checks what every attack must leave as it was: honest's job
// ends as node-1 says, its output intact; the leases are those of before;
// whatever the rogue stored about honest's job is set aside in its record;
// the audit passes.
func (s *suite) aftermath(t *testing.T, attack string, j honestJob) {
	t.Helper()
	rec, r := j.wait(t)
	if rec.Outcome != "succeeded" || rec.Node != node1 || len(rec.Attempts) != 1 || rec.Attempts[0].Node != node1 {
		t.Errorf("%s: honest's job %s ended %s on %s (%d attempts), want succeeded once on %s; its events: %s; %s",
			attack, j.id, rec.Outcome, rec.Node, len(rec.Attempts), node1, journey(s.w.jobEvents(t, j.id)), r)
	}
	if rec.Attempts != nil && rec.Attempts[0].Usage.CPUSeconds > 3600 {
		t.Errorf("%s: honest's job is billed %g cpu-seconds", attack, rec.Attempts[0].Usage.CPUSeconds)
	}
	if out, r := j.output(t); out != j.want {
		t.Errorf("%s: honest's output is %q, want %q: %s", attack, out, j.want, r)
	}
	now := s.w.leaseValues(t)
	for k, v := range s.leases {
		if now[k] != v {
			t.Errorf("%s: the lease %s is held by %q, was %q", attack, k, now[k], v)
		}
	}
	// What the rogue stored on its own subjects of honest's job: set
	// aside, every one; and nothing else of the job names it.
	aside := map[uint64]bool{}
	for _, e := range rec.Events {
		aside[e.Seq] = e.SetAside
	}
	for _, e := range s.w.jobEvents(t, j.id) {
		fromRogue := strings.HasSuffix(e.subject, "."+rogue)
		var body struct {
			Node string `json:"node"`
		}
		_ = json.Unmarshal(e.data, &body)
		switch {
		case fromRogue && e.ceType() != "" && !aside[e.seq] && hasEvent(rec, e.seq):
			t.Errorf("%s: the record counts the rogue's %s #%d", attack, e.ceType(), e.seq)
		case !fromRogue && body.Node == rogue:
			t.Errorf("%s: #%d %s on %s names the rogue: something acted on its word", attack, e.seq, e.ceType(), e.subject)
		}
	}
	if r := e31(t, auditor, 2*time.Minute, "audit", "--json"); r.err != nil {
		t.Errorf("%s: e31 audit: %s", attack, r)
	}
	if t.Failed() {
		t.Logf("%s: honest's job %s: %s", attack, j.id, journey(s.w.jobEvents(t, j.id)))
	}
}

func hasEvent(rec record, seq uint64) bool {
	for _, e := range rec.Events {
		if e.Seq == seq {
			return true
		}
	}
	return false
}
