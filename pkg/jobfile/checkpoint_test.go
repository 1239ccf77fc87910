package jobfile

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// TestParseCheckpoint reads a checkpoint and a checkpoint_of as the spec
// carries them, and says of each bad one where it is and what was expected.
func TestParseCheckpoint(t *testing.T) {
	t.Parallel()
	const ok = "work: {command: [a]}\nrequest: {limit: 1h}\n"
	job, err := Parse("job.yaml", []byte(ok+"checkpoint: {path: ckpt/state, every: 90s}\ndata:\n  - {name: prev, checkpoint_of: job-1}\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c := job.Spec.Checkpoint; c == nil || *c != (events.CheckpointSpec{Path: "ckpt/state", EverySeconds: 90}) {
		t.Errorf("checkpoint = %+v", c)
	}
	if d := job.Spec.Data; len(d) != 1 || d[0] != (events.DataRef{Name: "prev", CheckpointOf: "job-1"}) {
		t.Errorf("data = %+v", d)
	}
	// What the CLI sends: SUBMIT resolves checkpoint_of afterwards.
	if err := Validate(job.Spec); err != nil {
		t.Errorf("Validate: %v", err)
	}

	for _, c := range []struct{ name, src, want string }{
		{"every too short", "checkpoint: {path: ckpt, every: 500ms}\n", `job.yaml:3:33: checkpoint.every: must be at least 1s, got 500ms`},
		{"every not a duration", "checkpoint: {path: ckpt, every: often}\n", `job.yaml:3:33: checkpoint.every: "often" is not a duration (expected e.g. 10m, 1h30m, 2d or 90 for seconds)`},
		{"path escapes", "checkpoint: {path: ../x, every: 1m}\n", `job.yaml:3:20: checkpoint.path: "../x" must stay under /out (no "..")`},
		{"path absolute", "checkpoint: {path: /out/ckpt, every: 1m}\n", `job.yaml:3:20: checkpoint.path: "/out/ckpt" must be relative to /out (write "ckpt")`},
		{"path a glob", "checkpoint: {path: \"ck*\", every: 1m}\n", `job.yaml:3:20: checkpoint.path: "ck*" must name one folder, not a glob (no *, ?, [ or \)`},
		{"no every", "checkpoint: {path: ckpt}\n", `job.yaml:3:13: checkpoint.every: required (a duration such as 10m (how often the folder is saved while the job runs; at least 1s))`},
		{"not a mapping", "checkpoint: ckpt\n", `job.yaml:3:13: checkpoint: expected a mapping with path (a folder under /out) and every (a duration such as 10m), got "ckpt"`},
		{"two sources", "data:\n  - {name: a, from_job: j1, checkpoint_of: j2}\n", `job.yaml:4:5: data[0]: give one of path, from_job and checkpoint_of, not several`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("job.yaml", []byte(ok+c.src), t.TempDir())
			if err == nil || err.Error() != c.want {
				t.Errorf("Parse error:\n%v\nwant:\n%s", err, c.want)
			}
		})
	}
}

// TestValidateCheckpoint refuses by field path what Parse refuses by line.
func TestValidateCheckpoint(t *testing.T) {
	t.Parallel()
	spec := events.JobSpec{
		Work:       events.Work{Command: []string{"/bin/true"}},
		Request:    events.Request{CPU: 1, MemoryBytes: DefaultMemory, DiskBytes: DefaultDisk, LimitSeconds: 60},
		Checkpoint: &events.CheckpointSpec{Path: "a/../b", EverySeconds: 0.5},
		Data:       []events.DataRef{{Name: "c", CheckpointOf: "j1", Digest: "sha256:" + repeat("ab", 32), Kind: "dir"}},
	}
	want := `data[0]: has checkpoint_of and a digest or from_job (give one)
checkpoint.path: "a/../b" must stay under /out (no "..")
checkpoint.every_seconds: must be at least 1s, got 500ms`
	if err := Validate(spec); err == nil || err.Error() != want {
		t.Errorf("Validate:\n%v\nwant:\n%s", err, want)
	}
}
