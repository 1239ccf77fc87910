package hostile_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// image asks for a container image the operator allowed no one:
// SUBMIT must reject the job and say the image is not allowed.
func (s *suite) image(t *testing.T) {
	w, mal := s.w, s.mal
	before := w.lastSeq(t)
	sp := quick("image")
	sp["work"].(map[string]any)["image"] = "some-image:latest"
	job := mal.submit(t, "image", sp)
	end, evs := w.waitOver(t, job, 30*time.Second)
	switch {
	case end == "":
		mal.cancel(t, job)
		w.waitOver(t, job, 30*time.Second)
		t.Errorf("a job of mallory's naming image some-image:latest was not rejected within 30 s; it went %s", journey(evs))
	case !strings.HasPrefix(end, "rejected") || !strings.Contains(end, "not allowed"):
		t.Errorf("a job of mallory's naming image some-image:latest ended %q (%s), want rejected as not allowed", end, journey(evs))
	default:
		t.Logf("image some-image:latest: %s", end)
	}
	aftermath(t, s, "image", before)
}

// Mallory's quotas, as the operator sets them.
const (
	maxData   = 10 << 20
	maxQueued = 5
	maxRate   = 30 // a minute
)

// quotas has the operator set mallory's quotas, then mallory go past
// each: data beyond max-data is not stored, the job past max-queued and
// those past max-rate are rejected naming the limit, and what was
// accepted before stays.
func (s *suite) quotas(t *testing.T) {
	w, mal := s.w, s.mal
	before := w.lastSeq(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bucket, err := mal.js.ObjectStore(ctx, "E31_DATA_"+mallory)
	if err != nil {
		t.Fatalf("mallory: open its own bucket: %v", err)
	}
	kept := []byte("staged by mallory before its quotas were set\n")
	if _, err := bucket.PutBytes(ctx, "kept", kept); err != nil {
		t.Fatalf("mallory: store an object in its own bucket: %v", err)
	}

	args := []string{"setup", "--submitter", mallory, "--max-data", "10MiB", "--max-queued", fmt.Sprint(maxQueued), "--max-rate", fmt.Sprint(maxRate)}
	if r := e31(t, operator, 2*time.Minute, args...); r.err != nil {
		t.Fatalf("the operator could not set mallory's quotas with `e31 %s`: %s", strings.Join(args, " "), r)
	}

	t.Run("max-data", func(t *testing.T) {
		big := make([]byte, maxData+1<<20)
		_, _ = rand.Read(big)
		if _, err := bucket.PutBytes(ctx, "too-big", big); err == nil {
			t.Errorf("mallory stored %d MiB in its bucket, past its max-data of 10 MiB", len(big)>>20)
			_ = bucket.Delete(ctx, "too-big")
		} else {
			t.Logf("11 MiB into mallory's bucket: %v", err)
		}
		// The same through the CLI: staging fails, and no job is made.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "big.bin"), big[:maxData+1<<19], 0o644); err != nil {
			t.Fatal(err)
		}
		job := `name: too-much-data
work:
  command: ["/bin/sh", "-c", "wc -c \"$E31_DATA/big\" > \"$E31_OUTPUT/out.txt\""]
data:
  - name: big
    path: ./big.bin
request:
  cpu: 0.1
  memory: 64MiB
  limit: 1m
output:
  - out.txt
`
		if err := os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(job), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := e31(t, mallory, time.Minute, "submit", filepath.Join(dir, "job.yaml"), "--json", "--quiet"); r.err == nil {
			t.Errorf("mallory submitted a job staging 10.5 MiB past its max-data of 10 MiB: %s", r)
		} else {
			t.Logf("e31 submit of 10.5 MiB: %s", clip(strings.TrimSpace(r.stderr), 300))
		}
		// Read as the operator: a submitter may create no consumers, and
		// nats.go reads an object with one.
		got, err := w.objectBytes(t, "E31_DATA_"+mallory, "kept")
		if err != nil || !bytes.Equal(got, kept) {
			t.Errorf("what mallory stored before its quota was lost: %q, %v", got, err)
		}
	})

	t.Run("max-queued", func(t *testing.T) {
		var queued []string
		defer func() {
			for _, job := range queued {
				mal.cancel(t, job)
			}
			for _, job := range queued {
				if end, evs := w.waitOver(t, job, 30*time.Second); end == "" {
					t.Errorf("mallory's queued job %s did not end within 30 s of its cancel: %s", job, journey(evs))
				}
			}
		}()
		for i := range maxQueued + 1 {
			job := mal.submit(t, fmt.Sprintf("queued-%d", i), stuck(fmt.Sprintf("queued-%d", i)))
			reason, ok := accepted(t, w, job)
			switch {
			case ok:
				queued = append(queued, job)
				if i == maxQueued {
					t.Errorf("mallory's job number %d was accepted with %d of its jobs queued, past its max-queued of %d", i+1, maxQueued, maxQueued)
				}
			case i < maxQueued:
				t.Errorf("mallory's job number %d was rejected with %d queued, within its max-queued of %d: %s", i+1, i, maxQueued, reason)
			case !strings.Contains(reason, "max-queued"):
				t.Errorf("mallory's job number %d, past max-queued, was rejected for %q, which does not name max-queued", i+1, reason)
			default:
				t.Logf("job %d of mallory's: rejected: %s", i+1, reason)
			}
		}
		for _, job := range queued {
			if end := ending(w.jobEvents(t, job)); end != "" {
				t.Errorf("mallory's queued job %s, accepted before the limit was reached, ended: %s", job, end)
			}
		}
	})

	t.Run("max-rate", func(t *testing.T) {
		// Few jobs in flight at once, so that only the rate can refuse
		// one: each is a quick job, waited for before the next when two
		// are running.
		var ok, inFlight []string
		var refusal string
		start := time.Now()
		for i := 0; i < 2*maxRate && time.Since(start) < 50*time.Second; i++ {
			for len(inFlight) >= 2 {
				w.waitOver(t, inFlight[0], 30*time.Second)
				inFlight = inFlight[1:]
			}
			job := mal.submit(t, fmt.Sprintf("rate-%d", i), quick(fmt.Sprintf("rate-%d", i)))
			reason, ok2 := accepted(t, w, job)
			if ok2 {
				ok = append(ok, job)
				inFlight = append(inFlight, job)
				continue
			}
			if !strings.Contains(reason, "max-rate") {
				t.Errorf("mallory's submission %d of a burst was rejected for %q, which does not name max-rate", i+1, reason)
			}
			refusal = reason
			break
		}
		took := time.Since(start)
		if refusal == "" {
			t.Errorf("mallory had %d jobs accepted in %s, past a max-rate of %d a minute, and none was refused", len(ok), took.Round(time.Second), maxRate)
		} else {
			t.Logf("after %d accepted in %s: rejected: %s", len(ok), took.Round(time.Second), refusal)
		}
		if len(ok) > maxRate {
			t.Errorf("mallory had %d jobs accepted in %s, past its max-rate of %d a minute", len(ok), took.Round(time.Second), maxRate)
		}
		for _, job := range ok {
			if end, evs := w.waitOver(t, job, 30*time.Second); end != "released: succeeded" {
				t.Errorf("mallory's job %s, accepted within its rate, ended %q: %s", job, end, journey(evs))
			}
		}
	})
	aftermath(t, s, "quotas", before)
}
