package hostile_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// garbage is one body mallory publishes on one of its tails.
type garbage struct {
	name   string
	header map[string]string
	data   []byte
}

// garbageFor is everything mallory publishes on its tail of job
// ("requested", "cancel" or "delete"): junk, bodies at and over the
// bounds, wrong types, events it does not own, and forged identities.
func garbageFor(t testing.TB, tail, job, nodeName string) []garbage {
	t.Helper()
	tailType := map[string]string{"requested": typeRequested, "cancel": typeCancel, "delete": typeDelete}[tail]
	seq := 0
	ownID := func() map[string]string {
		seq++
		return headers(tailType, job, fmt.Sprintf("%s/%s/x%d", job, tail, seq))
	}
	junk := make([]byte, 200)
	_, _ = rand.Read(junk)
	padded := func(size int) []byte {
		return append(append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), size-8)...), '"', '}')
	}
	released := example(t, typeReleased)
	released["node"] = nodeName
	submitted := example(t, typeSubmitted)
	submitted["submitter"] = mallory

	gs := []garbage{
		{"junk bytes, no headers", nil, junk},
		{"junk under event headers", ownID(), junk},
		{"a body just under the log's 256 KiB bound", ownID(), padded(256<<10 - 512)},
		{"a body just under 1 MiB", ownID(), padded(1<<20 - 4096)},
		{"a body over 1 MiB", ownID(), padded(1<<20 + 1)},
		{"JSON null", ownID(), []byte("null")},
		{"a JSON array", ownID(), []byte("[1,2,3]")},
		{"a ComputeReleased body under its ce-type", headers(typeReleased, job, job+"/released/7"), mustJSON(released)},
		{"a JobSubmitted body under its ce-type, with its id", headers(typeSubmitted, job, job+"/submitted"), mustJSON(submitted)},
	}
	switch tail {
	case "requested":
		gs = append(gs,
			garbage{"a request with wrong types", ownID(), []byte(`{"submitter": 7, "spec": "everything"}`)},
			garbage{"a request forged as honest's", ownID(), mustJSON(map[string]any{"submitter": honest, "spec": quick("forged")})})
	case "cancel":
		gs = append(gs,
			garbage{"a cancel with wrong types", ownID(), []byte(`{"by": 7, "reason": ["x"]}`)},
			garbage{"a cancel forged as honest's", ownID(), mustJSON(map[string]any{"by": honest})},
			garbage{"a cancel forged as the operator's", ownID(), mustJSON(map[string]any{"by": operator})},
			garbage{"a cancel of its own", headers(typeCancel, job, job+"/cancel"), mustJSON(map[string]any{"by": mallory})})
	case "delete":
		gs = append(gs,
			garbage{"a delete with wrong types", ownID(), []byte(`{"what": 5, "by": ["mallory"]}`)},
			garbage{"a delete forged as honest's", ownID(), mustJSON(map[string]any{"what": "all", "by": honest})},
			garbage{"a delete forged as the operator's", ownID(), mustJSON(map[string]any{"what": "all", "by": operator})},
			garbage{"a delete of its own", headers(typeDelete, job, job+"/delete/all"), mustJSON(map[string]any{"what": "all", "by": mallory})})
	}
	return gs
}

// garbage publishes everything mallory may publish on its tails
// (e31.job.<id>.requested|cancel|delete.mallory) of honest's running job,
// honest's finished one, its own running job and a job id nobody used:
// none of it may stop a job, change honest's output, or leave in the log
// anything mallory could not write.
func (s *suite) garbage(t *testing.T) {
	w, mal, warm := s.w, s.mal, s.warm
	running := submitHonest(t, "running-during-garbage", 6*time.Second)
	own := mal.submit(t, "garbage-own", spec("garbage-own", `sleep 4; echo ok > "$E31_OUTPUT/out.txt"`, 0.25, time.Minute))
	var nodeName string
	for _, job := range []string{running.id, own} {
		evs, ok := w.waitFor(t, job, 30*time.Second, has(typeStarted))
		if !ok {
			t.Fatalf("job %s did not start within 30 s, before any attack: %s", job, journey(evs))
		}
		nodeName = node(evs)
	}
	targets := []struct{ what, job string }{
		{"honest's running job", running.id},
		{"honest's finished job", warm.id},
		{"mallory's running job", own},
		{"a job id nobody used", newID("garbage-fresh")},
	}
	before := w.lastSeq(t)
	type result struct {
		stored  int
		refused map[string]int
	}
	results := map[string]*result{}
	for _, tg := range targets {
		for _, tail := range []string{"requested", "cancel", "delete"} {
			for _, g := range garbageFor(t, tail, tg.job, nodeName) {
				r := results[g.name]
				if r == nil {
					r = &result{refused: map[string]int{}}
					results[g.name] = r
				}
				err := mal.publish("e31.job."+tg.job+"."+tail+"."+mallory, g.header, g.data)
				if err != nil {
					r.refused[clip(err.Error(), 80)]++
					continue
				}
				r.stored++
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(results)) {
		r := results[name]
		t.Logf("%-55s stored %2d, refused %v", name+":", r.stored, r.refused)
	}
	if !mal.nc.IsConnected() {
		t.Errorf("mallory's connection was closed by its own publishes: %v", mal.nc.LastError())
	}

	// Every job it aimed at still ends, and ends as it would have.
	if end, evs := w.waitOver(t, own, honestWait); end == "" {
		t.Errorf("mallory's own job %s never ended after the garbage on its tails: it froze (events: %s)", own, journey(evs))
	} else {
		t.Logf("mallory's own job: %s", end)
	}
	warm.checkOutput(t, "garbage")
	aftermath(t, s, "garbage", before, running)
}

// msgids has mallory store, on its own request tail of honest's running
// job, the events the job's services will record next (RunStopped,
// OutputReturned, ComputeReleased), each under the ce-id and Nats-Msg-Id
// envelope.json says its owner will give it. JetStream drops a message
// whose Nats-Msg-Id it stored within its duplicate window (two minutes):
// unless e31 tells the two apart, the real events are taken for repeats
// of mallory's and never stored, and the job never ends.
func (s *suite) msgids(t *testing.T) {
	w, mal := s.w, s.mal
	running := submitHonest(t, "running-during-msgids", 6*time.Second)
	evs, ok := w.waitFor(t, running.id, 30*time.Second, has(typeStarted))
	if !ok {
		t.Fatalf("honest's job %s did not start within 30 s, before any attack: %s", running.id, journey(evs))
	}
	job, nodeName := running.id, node(evs)
	before := w.lastSeq(t)
	for _, ceType := range []string{typeStopped, typeReturned, typeReleased} {
		body := example(t, ceType)
		if _, ok := body["node"]; ok {
			body["node"] = nodeName
		}
		id := fmt.Sprintf("%s/%s/1", job, kindOf(t, ceType).token())
		if err := mal.publish(kindOf(t, typeRequested).subjectFor(job, "", mallory), headers(ceType, job, id), mustJSON(body)); err != nil {
			t.Logf("mallory's %s with the id %s was refused: %v", ceType, id, err)
		}
	}
	aftermath(t, s, "msgids", before, running)
}
