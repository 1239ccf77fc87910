package retention_test

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/output/retention"
)

// TestCheckpointsAreKeptLikeOutput: a job's checkpoint saves are part of
// its output. Each attempt keeps its last save, a save sent after its
// attempt was lost counts for nothing, the job's success keeps only the
// last save of all, and a deletion of the output takes the last one too.
func TestCheckpointsAreKeptLikeOutput(t *testing.T) {
	t.Parallel()
	h1, h2 := events.Hold{Attempt: 1, Node: "n1"}, events.Hold{Attempt: 2, Node: "n2"}
	save := func(h events.Hold, n int, c byte) *events.CheckpointSaved {
		return &events.CheckpointSaved{Hold: h, N: n, Path: "ckpt", Manifest: digest(c)}
	}
	root := func(c byte) retention.Root {
		return retention.Root{Tenant: "alice", Kind: stage.KindDir, Digest: digest(c)}
	}
	r := retention.NewRefs()
	apply := func(envs []events.Envelope) {
		for _, e := range envs {
			r.Apply(e)
		}
	}
	apply(history("j", 1,
		&events.JobSubmitted{Submitter: "alice", Spec: events.JobSpec{RetentionSeconds: 3600}},
		&events.ComputeHeld{Hold: h1},
		&events.RunStarted{Hold: h1},
		save(h1, 1, 'e'),
		save(h1, 2, 'f'),
		&events.HoldLost{Hold: h1},
		save(h1, 3, 'g'), // too late
		&events.ComputeReleased{Hold: h1, Outcome: events.NodeLost},
		&events.ComputeHeld{Hold: h2},
		&events.RunStarted{Hold: h2, ResumedFrom: "1.2"},
		save(h2, 1, 'h'),
	))
	if r.Count(root('e')) != 0 || r.Count(root('f')) != 1 || r.Count(root('g')) != 0 || r.Count(root('h')) != 1 {
		t.Fatalf("held while attempt 2 runs: e %d f %d g %d h %d, want attempt 1's last (f) and attempt 2's (h)",
			r.Count(root('e')), r.Count(root('f')), r.Count(root('g')), r.Count(root('h')))
	}
	apply(history("j", 20,
		&events.RunStopped{Hold: h2, Outcome: events.Succeeded},
		&events.OutputReturned{Hold: h2, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}},
		&events.ComputeReleased{Hold: h2, Outcome: events.Succeeded, Final: true},
	))
	if r.Count(root('f')) != 0 || r.Count(root('h')) != 1 {
		t.Errorf("after success: f %d h %d, want the last save alone", r.Count(root('f')), r.Count(root('h')))
	}
	held := r.Job("j")
	if !held.Dropped[root('e')] || !held.Dropped[root('f')] {
		t.Errorf("dropped %v: want the saves let go of, for the next sweep", held.Dropped)
	}
	r.Apply(history("j", 40, &events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested, By: "alice"})[0])
	if r.Count(root('h')) != 0 || !r.Job("j").Dropped[root('h')] {
		t.Errorf("after the output's deletion the last save is held %d times", r.Count(root('h')))
	}
}
