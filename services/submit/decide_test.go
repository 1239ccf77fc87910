package submit_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/services/submit"
)

// TestDecide: the decision on a request, from what SUBMIT knows, and when
// it knows too little, nil, so that the adapter reads the log and then the
// store only as far as the request gets.
func TestDecide(t *testing.T) {
	t.Parallel()
	alice := limits.Limits{Submitter: "alice", MaxQueued: 2, Images: []string{"alpine:3"}}
	idle := &limits.Usage{}
	none := &submit.Refs{}
	with := func(f func(*events.JobSpec)) events.JobSpec {
		s := validSpec()
		f(&s)
		return s
	}
	staged := events.DataRef{Name: "in", Digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", Kind: "file", Bytes: 3}
	earlier := events.DataRef{Name: "model", FromJob: "job-a"}
	out := events.DataRef{Digest: "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", Kind: "file", Bytes: 9}
	cases := []struct {
		name      string
		submitter string
		spec      events.JobSpec
		st        submit.State
		// want: "submitted", "nil", or the rejection's reason contains it.
		want string
		// after: the submitted job's After.
		after []string
		data  []events.DataRef
	}{
		{name: "no submitter", spec: validSpec(), st: submit.State{Limits: alice}, want: "submitter: required"},
		{name: "invalid declaration needs no reads", submitter: "alice",
			spec: with(func(s *events.JobSpec) { s.Request.LimitSeconds = 0 }), st: submit.State{Limits: alice}, want: "limit"},
		{name: "an image not allowed", submitter: "alice",
			spec: with(func(s *events.JobSpec) { s.Work.Image = "ubuntu" }), st: submit.State{Limits: alice}, want: `work.image: image "ubuntu" is not allowed`},
		{name: "valid: needs the usage first", submitter: "alice", spec: validSpec(), st: submit.State{Limits: alice}, want: "nil"},
		{name: "over the quota: no reads of the store", submitter: "alice", spec: validSpec(),
			st: submit.State{Limits: alice, Usage: &limits.Usage{Queued: 2}}, want: "max-queued"},
		{name: "within the quota: needs the refs", submitter: "alice", spec: validSpec(),
			st: submit.State{Limits: alice, Usage: idle}, want: "nil"},
		{name: "submitted", submitter: "alice", spec: validSpec(),
			st: submit.State{Limits: alice, Usage: idle, Refs: none}, want: "submitted"},
		{name: "after itself", submitter: "alice", spec: with(func(s *events.JobSpec) { s.After = []string{"job-self"} }),
			st: submit.State{Limits: alice, Usage: idle, Refs: none}, want: "after[0]: a job cannot wait for itself"},
		{name: "after another submitter's job", submitter: "alice", spec: with(func(s *events.JobSpec) { s.After = []string{"job-b"} }),
			st: submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Owners: map[string]string{"job-b": "bob"}}}, want: "after[0]: no such job job-b"},
		{name: "after a job that does not exist", submitter: "alice", spec: with(func(s *events.JobSpec) { s.After = []string{"job-b"} }),
			st: submit.State{Limits: alice, Usage: idle, Refs: none}, want: "after[0]: no such job job-b"},
		{name: "after an own job", submitter: "alice", spec: with(func(s *events.JobSpec) { s.After = []string{"job-a"} }),
			st: submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Owners: map[string]string{"job-a": "alice"}}}, want: "submitted", after: []string{"job-a"}},
		{name: "staged data not intact", submitter: "alice", spec: with(func(s *events.JobSpec) { s.Data = []events.DataRef{staged} }),
			st:   submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Staged: map[int]string{0: "staged data sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa is not intact: corrupt"}}},
			want: `data[0] "in": staged data sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa is not intact`},
		{name: "an earlier job's output, pending: runs after it", submitter: "alice", spec: with(func(s *events.JobSpec) { s.Data = []events.DataRef{earlier} }),
			st:   submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Outputs: map[string]submit.Output{"job-a": {Pending: true}}}},
			want: "submitted", after: []string{"job-a"}, data: []events.DataRef{earlier}},
		{name: "an earlier job's output, returned: resolved", submitter: "alice", spec: with(func(s *events.JobSpec) { s.Data = []events.DataRef{earlier} }),
			st:   submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Outputs: map[string]submit.Output{"job-a": {Ref: out}}}},
			want: "submitted", data: []events.DataRef{{Name: "model", FromJob: "job-a", Digest: "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", Kind: "file", Bytes: 9}}},
		{name: "an earlier job's output, unusable", submitter: "alice", spec: with(func(s *events.JobSpec) { s.Data = []events.DataRef{earlier} }),
			st:   submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Outputs: map[string]submit.Output{"job-a": {Problem: "from_job job-a did not succeed (failed)"}}}},
			want: `data[0] "model": from_job job-a did not succeed`},
		{name: "a job's last checkpoint: resolved", submitter: "alice", spec: with(func(s *events.JobSpec) { s.Data = []events.DataRef{{Name: "ckpt", CheckpointOf: "job-a"}} }),
			st:   submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Checkpoints: map[string]submit.Output{"job-a": {Ref: events.DataRef{Digest: out.Digest, Kind: "dir", Bytes: 9, Files: 2}}}}},
			want: "submitted", data: []events.DataRef{{Name: "ckpt", CheckpointOf: "job-a", Digest: out.Digest, Kind: "dir", Bytes: 9, Files: 2}}},
		{name: "a job's last checkpoint, none saved", submitter: "alice", spec: with(func(s *events.JobSpec) { s.Data = []events.DataRef{{Name: "ckpt", CheckpointOf: "job-a"}} }),
			st:   submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Checkpoints: map[string]submit.Output{"job-a": {Problem: "checkpoint_of job-a: the job saved no checkpoint"}}}},
			want: `data[0] "ckpt": checkpoint_of job-a: the job saved no checkpoint`},
		{name: "every problem named", submitter: "alice", spec: with(func(s *events.JobSpec) {
			s.After = []string{"job-self", "job-b"}
			s.Data = []events.DataRef{staged}
		}), st: submit.State{Limits: alice, Usage: idle, Refs: &submit.Refs{Staged: map[int]string{0: "gone"}}},
			want: `a job cannot wait for itself; after[1]: no such job job-b; data[0] "in": gone`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			spec := c.spec
			before := spec.After
			ev := submit.Decide("job-self", &events.JobRequested{Submitter: c.submitter, Spec: spec}, c.st)
			switch got := ev.(type) {
			case nil:
				if c.want != "nil" {
					t.Fatalf("no decision, want %q", c.want)
				}
			case *events.JobSubmitted:
				if c.want != "submitted" {
					t.Fatalf("submitted, want %q", c.want)
				}
				if got.Submitter != c.submitter || !reflect.DeepEqual(got.Spec.After, c.after) {
					t.Errorf("submitted by %q after %v, want %q after %v", got.Submitter, got.Spec.After, c.submitter, c.after)
				}
				if c.data != nil && !reflect.DeepEqual(got.Spec.Data, c.data) {
					t.Errorf("data %+v, want %+v", got.Spec.Data, c.data)
				}
			case *events.JobRejected:
				if c.want == "nil" || c.want == "submitted" || !strings.Contains(got.Reason, c.want) {
					t.Fatalf("rejected: %s; want %q", got.Reason, c.want)
				}
			default:
				t.Fatalf("decided %T", ev)
			}
			if !reflect.DeepEqual(spec.After, before) {
				t.Errorf("Decide changed the request's after: %v", spec.After)
			}
		})
	}
}

// TestOnceDecidesARequestOnce: a request delivered again after its decision
// (or after a cancel) records nothing more.
func TestOnceDecidesARequestOnce(t *testing.T) {
	t.Parallel()
	decision := events.JobSubmitted{Submitter: "alice"}
	for _, c := range []struct {
		name  string
		after []events.Envelope
		want  int
	}{
		{"nothing since", nil, 1},
		{"a note since", []events.Envelope{{Event: &events.JobRequested{}}}, 1},
		{"submitted since", []events.Envelope{{Event: &events.JobSubmitted{}}}, 0},
		{"rejected since", []events.Envelope{{Event: &events.JobRejected{}}}, 0},
		{"cancelled since", []events.Envelope{{Event: &events.JobCancelled{}}}, 0},
	} {
		if got := submit.Once(c.after, &decision); len(got) != c.want {
			t.Errorf("%s: %d events, want %d", c.name, len(got), c.want)
		}
	}
}
