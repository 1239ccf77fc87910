package metrics

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// t0 is when every test log starts.
var t0 = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

// logOf stores evs as a log would: sequences from 1, in order.
func logOf(evs ...events.Envelope) []events.Envelope {
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
	}
	return evs
}

// at is one event about subject, seconds after t0.
func at(seconds float64, subject string, ev events.Event) events.Envelope {
	return events.New(subject, ev, "test", t0.Add(time.Duration(seconds*float64(time.Second))))
}

var (
	spec  = events.JobSpec{Work: events.Work{Command: []string{"true"}}, Request: events.Request{CPU: 2, MemoryBytes: gib, LimitSeconds: 60}}
	hold1 = events.Hold{Attempt: 1, Node: "n1", CPU: 2, MemoryBytes: gib, GPU: 1}
	hold2 = events.Hold{Attempt: 2, Node: "n2", CPU: 2, MemoryBytes: gib, GPU: 1}
)

// life is a job's whole life, from its request to its final release, with
// the given outcome: submitted at 1 s, held at 3 s, started at 3.5 s,
// stopped at 13 s, released at 14 s (held 11 s).
func life(job, submitter string, outcome events.Outcome) []events.Envelope {
	return []events.Envelope{
		at(0, job, &events.JobRequested{Submitter: submitter, Spec: spec}),
		at(1, job, &events.JobSubmitted{Submitter: submitter, Spec: spec}),
		at(3, job, &events.ComputeHeld{Hold: hold1, Submitter: submitter, Spec: spec}),
		at(3.5, job, &events.RunStarted{Hold: hold1}),
		at(13, job, &events.RunStopped{Hold: hold1, Outcome: outcome}),
		at(13.5, job, &events.OutputReturned{Hold: hold1, Outcome: outcome}),
		at(14, job, &events.ComputeReleased{Hold: hold1, Outcome: outcome, Final: true}),
	}
}

func TestProjection(t *testing.T) {
	t.Parallel()
	full := life("j1", "alice", events.Succeeded)
	cases := []struct {
		name         string
		log          []events.Envelope
		wantJobs     map[string]int
		wantFinished map[events.Outcome]int
		wantMeter    map[string]Meter
		wantLive     int
		check        func(t *testing.T, f Figures)
	}{
		{
			name:         "a job just requested is submitted",
			log:          logOf(full[:1]...),
			wantJobs:     map[string]int{hold.StateSubmitted: 1},
			wantFinished: map[events.Outcome]int{},
			wantMeter:    map[string]Meter{},
			wantLive:     1,
		},
		{
			name:         "a held job holds its node's resources and has waited",
			log:          logOf(full[:3]...),
			wantJobs:     map[string]int{hold.StateHeld: 1},
			wantFinished: map[events.Outcome]int{},
			wantMeter:    map[string]Meter{},
			wantLive:     1,
			check: func(t *testing.T, f Figures) {
				if got := f.Nodes["n1"].Held; got != (Resources{CPU: 2, MemoryBytes: gib, GPU: 1}) {
					t.Errorf("n1 held %+v", got)
				}
				if f.Wait.Count != 1 || f.Wait.Sum != 2 {
					t.Errorf("wait: %d observations, %g s; want 1, 2 s", f.Wait.Count, f.Wait.Sum)
				}
				if f.Nodes["n1"].Announced {
					t.Error("a node known only from a hold is not announced")
				}
			},
		},
		{
			name:         "a job's whole life is metered from hold to release",
			log:          logOf(full...),
			wantJobs:     map[string]int{hold.StateReleased: 1},
			wantFinished: map[events.Outcome]int{events.Succeeded: 1},
			wantMeter:    map[string]Meter{"alice": {HeldSeconds: 11, CPUCoreSeconds: 22, MemoryGiBSeconds: 11, GPUSeconds: 11}},
			check: func(t *testing.T, f Figures) {
				if got := f.Nodes["n1"].Held; got != (Resources{}) {
					t.Errorf("n1 still holds %+v after the release", got)
				}
				for name, h := range map[string]struct {
					h    Histogram
					want float64
				}{"wait": {f.Wait, 2}, "start": {f.Start, 0.5}, "release": {f.Release, 1}} {
					if h.h.Count != 1 || h.h.Sum != h.want {
						t.Errorf("%s: %d observations, %g s; want 1, %g s", name, h.h.Count, h.h.Sum, h.want)
					}
				}
				if f.Events[events.TypeComputeHeld] != 1 || f.Events[events.TypeComputeReleased] != 1 {
					t.Errorf("events %v", f.Events)
				}
			},
		},
		{
			name: "the outcome is the returned output's, not the stop's",
			log: logOf(append(life("j1", "alice", events.Succeeded)[:5],
				at(13.5, "j1", &events.OutputReturned{Hold: hold1, Outcome: events.Failed}),
				at(14, "j1", &events.ComputeReleased{Hold: hold1, Outcome: events.Failed, Final: true}))...),
			wantJobs:     map[string]int{hold.StateReleased: 1},
			wantFinished: map[events.Outcome]int{events.Failed: 1},
		},
		{
			name: "a rejected job was never held",
			log: logOf(at(0, "j1", &events.JobRequested{Submitter: "alice", Spec: spec}),
				at(1, "j1", &events.JobRejected{Reason: "request.limit: required"})),
			wantJobs:     map[string]int{hold.StateRejected: 1},
			wantFinished: map[events.Outcome]int{events.Rejected: 1},
			wantMeter:    map[string]Meter{},
		},
		{
			name:         "a rejection of a request that did not decode counts",
			log:          logOf(at(1, "j1", &events.JobRejected{Reason: "not a valid event"})),
			wantJobs:     map[string]int{hold.StateRejected: 1},
			wantFinished: map[events.Outcome]int{events.Rejected: 1},
		},
		{
			name: "a job cancelled while it waits",
			log: logOf(full[0], full[1],
				at(2, "j1", &events.CancelRequested{By: "alice"}),
				at(2.5, "j1", &events.JobCancelled{Reason: "cancelled by alice"})),
			wantJobs:     map[string]int{hold.StateCancelled: 1},
			wantFinished: map[events.Outcome]int{events.Cancelled: 1},
			wantMeter:    map[string]Meter{},
		},
		{
			name: "a lost node's attempt is metered and the job waits again",
			log: logOf(full[0], full[1], full[2], full[3],
				at(5, "j1", &events.HoldLost{Hold: hold1, Reason: "node n1 lost"}),
				at(6, "j1", &events.ComputeReleased{Hold: hold1, Outcome: events.NodeLost})),
			wantJobs:     map[string]int{hold.StateWaiting: 1},
			wantFinished: map[events.Outcome]int{},
			wantMeter:    map[string]Meter{"alice": {LostSeconds: 3}},
			wantLive:     1,
			check: func(t *testing.T, f Figures) {
				if f.Release.Count != 1 || f.Release.Sum != 1 {
					t.Errorf("release: %d observations, %g s; want 1, 1 s (from the loss)", f.Release.Count, f.Release.Sum)
				}
			},
		},
		{
			name: "an attempt RENT ended at its limit plus grace ends the job limit_exceeded, a late stop set aside",
			log: logOf(full[0], full[1], full[2], full[3],
				at(100, "j1", &events.HoldExpired{Hold: hold1, Reason: "node n1 had not reported"}),
				at(100.5, "j1", &events.RunStopped{Hold: hold1, Outcome: events.Succeeded}),
				at(101, "j1", &events.ComputeReleased{Hold: hold1, Outcome: events.LimitExceeded, Final: true})),
			wantJobs:     map[string]int{hold.StateReleased: 1},
			wantFinished: map[events.Outcome]int{events.LimitExceeded: 1},
			wantMeter:    map[string]Meter{"alice": {HeldSeconds: 98, CPUCoreSeconds: 196, MemoryGiBSeconds: 98, GPUSeconds: 98}},
		},
		{
			name: "a job held again after a lost node ends with its last attempt",
			log: logOf(full[0], full[1], full[2],
				at(5, "j1", &events.HoldLost{Hold: hold1, Reason: "node n1 lost"}),
				at(6, "j1", &events.ComputeReleased{Hold: hold1, Outcome: events.NodeLost}),
				// The lost node's late report changes nothing.
				at(6.5, "j1", &events.OutputReturned{Hold: hold1, Outcome: events.Succeeded}),
				at(10, "j1", &events.ComputeHeld{Hold: hold2, Submitter: "alice", Spec: spec}),
				at(11, "j1", &events.RunStarted{Hold: hold2}),
				at(20, "j1", &events.RunStopped{Hold: hold2, Outcome: events.LimitExceeded}),
				at(21, "j1", &events.OutputReturned{Hold: hold2, Outcome: events.LimitExceeded}),
				at(22, "j1", &events.ComputeReleased{Hold: hold2, Outcome: events.LimitExceeded, Final: true})),
			wantJobs:     map[string]int{hold.StateReleased: 1},
			wantFinished: map[events.Outcome]int{events.LimitExceeded: 1},
			wantMeter:    map[string]Meter{"alice": {HeldSeconds: 12, CPUCoreSeconds: 24, MemoryGiBSeconds: 12, GPUSeconds: 12, LostSeconds: 3}},
			check: func(t *testing.T, f Figures) {
				if f.Wait.Count != 2 || f.Wait.Sum != 6 {
					t.Errorf("wait: %d observations, %g s; want 2, 6 s (2 s, then 4 s after the loss)", f.Wait.Count, f.Wait.Sum)
				}
				if f.Nodes["n1"].Held != (Resources{}) || f.Nodes["n2"].Held != (Resources{}) {
					t.Errorf("nodes still hold something: %+v", f.Nodes)
				}
			},
		},
		{
			name:         "the same sequence applied twice changes nothing",
			log:          append(logOf(full...), logOf(full...)...),
			wantJobs:     map[string]int{hold.StateReleased: 1},
			wantFinished: map[events.Outcome]int{events.Succeeded: 1},
			wantMeter:    map[string]Meter{"alice": {HeldSeconds: 11, CPUCoreSeconds: 22, MemoryGiBSeconds: 11, GPUSeconds: 11}},
		},
		{
			name: "an event stored again past the duplicate window changes nothing",
			log: logOf(full[0], full[1], full[2], full[1], full[2], full[3], full[3], full[4], full[5], full[5],
				full[6], at(100, "j1", &events.Deleted{What: events.WhatOutput, Cause: "expired"})),
			wantJobs:     map[string]int{hold.StateReleased: 1},
			wantFinished: map[events.Outcome]int{events.Succeeded: 1},
			wantMeter:    map[string]Meter{"alice": {HeldSeconds: 11, CPUCoreSeconds: 22, MemoryGiBSeconds: 11, GPUSeconds: 11}},
			check: func(t *testing.T, f Figures) {
				if f.Wait.Count != 1 || f.Start.Count != 1 {
					t.Errorf("a repeated event was observed twice: wait %d, start %d", f.Wait.Count, f.Start.Count)
				}
				if f.Events[events.TypeComputeHeld] != 2 {
					t.Errorf("events_total counts every message read: %v", f.Events)
				}
			},
		},
		{
			name: "jobs of several submitters",
			log: logOf(append(append(life("j1", "alice", events.Succeeded), life("j2", "bob", events.Failed)...),
				life("j3", "alice", events.OutOfMemory)...)...),
			wantJobs:     map[string]int{hold.StateReleased: 3},
			wantFinished: map[events.Outcome]int{events.Succeeded: 1, events.Failed: 1, events.OutOfMemory: 1},
			wantMeter: map[string]Meter{
				"alice": {HeldSeconds: 22, CPUCoreSeconds: 44, MemoryGiBSeconds: 22, GPUSeconds: 22},
				"bob":   {HeldSeconds: 11, CPUCoreSeconds: 22, MemoryGiBSeconds: 11, GPUSeconds: 11},
			},
		},
		{
			name: "nodes join, are lost and come back",
			log: logOf(
				at(0, "n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 4, MemoryBytes: 8 * gib, DiskBytes: 20 * gib, Isolation: events.IsolationSandbox}),
				at(0, "n2", &events.NodeAnnounced{Node: "n2", Boot: "b1", CPU: 2, MemoryBytes: gib}),
				at(1, "n1", &events.NodeAnnounced{Node: "n1", Boot: "b2", CPU: 4, MemoryBytes: 8 * gib, DiskBytes: 20 * gib, Isolation: events.IsolationSandbox}),
				// The expiry of a boot the node has left behind changes nothing.
				at(2, "n1", &events.NodeExpired{Node: "n1", Boot: "b1", Reason: "lease expired"}),
				at(3, "n2", &events.NodeExpired{Node: "n2", Boot: "b1", Reason: "lease expired"})),
			wantJobs: map[string]int{},
			check: func(t *testing.T, f Figures) {
				want := map[string]Node{
					"n1": {Announced: true, Up: true, Isolation: "sandbox", Capacity: Resources{CPU: 4, MemoryBytes: 8 * gib, DiskBytes: 20 * gib}},
					"n2": {Announced: true, Up: false, Isolation: IsolationUnknown, Capacity: Resources{CPU: 2, MemoryBytes: gib}},
				}
				if !reflect.DeepEqual(f.Nodes, want) {
					t.Errorf("nodes\n got %+v\nwant %+v", f.Nodes, want)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := NewProjection()
			for _, e := range c.log {
				p.Apply(e)
			}
			f := p.Figures()
			if c.wantJobs != nil && !maps.Equal(f.Jobs, c.wantJobs) {
				t.Errorf("jobs %v, want %v", f.Jobs, c.wantJobs)
			}
			if c.wantFinished != nil && !maps.Equal(f.Finished, c.wantFinished) {
				t.Errorf("finished %v, want %v", f.Finished, c.wantFinished)
			}
			if c.wantMeter != nil && !maps.EqualFunc(f.Meter, c.wantMeter, meterNear) {
				t.Errorf("meter %+v, want %+v", f.Meter, c.wantMeter)
			}
			if p.Live() != c.wantLive {
				t.Errorf("%d live jobs kept, want %d", p.Live(), c.wantLive)
			}
			if last := c.log[len(c.log)-1].Seq; f.Applied != last {
				t.Errorf("applied #%d, want #%d", f.Applied, last)
			}
			if c.check != nil {
				c.check(t, f)
			}
		})
	}
}

func meterNear(a, b Meter) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return near(a.HeldSeconds, b.HeldSeconds) && near(a.CPUCoreSeconds, b.CPUCoreSeconds) &&
		near(a.MemoryGiBSeconds, b.MemoryGiBSeconds) && near(a.GPUSeconds, b.GPUSeconds)
}

// TestProjectionForgetsJobsOnceOver checks that memory follows the live
// jobs, not the length of the log.
func TestProjectionForgetsJobsOnceOver(t *testing.T) {
	t.Parallel()
	p := NewProjection()
	var seq uint64
	for i := range 1000 {
		for _, e := range life(fmt.Sprintf("j%d", i), "alice", events.Succeeded) {
			seq++
			e.Seq = seq
			p.Apply(e)
		}
	}
	if p.Live() != 0 {
		t.Errorf("%d jobs kept after all were released", p.Live())
	}
	if got := p.Figures().Jobs[hold.StateReleased]; got != 1000 {
		t.Errorf("%d released, want 1000", got)
	}
}

func TestProjectionCountsWhatItCannotFold(t *testing.T) {
	t.Parallel()
	p := NewProjection()
	p.Skip(1, true)
	p.Skip(2, false)
	p.Skip(2, false) // read again: changes nothing
	f := p.Figures()
	if f.Events[TypeUnknown] != 1 || f.Events[TypeUndecodable] != 1 || f.Applied != 2 {
		t.Errorf("events %v applied #%d; want one unknown, one undecodable, #2", f.Events, f.Applied)
	}
}

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	var h Histogram
	for _, d := range []time.Duration{-time.Second, 0, 5 * time.Millisecond, time.Second, 48 * time.Hour} {
		h.observe(d)
	}
	c := h.Cumulative()
	for bound, want := range map[float64]uint64{0.005: 3, 1: 4, 24 * 3600: 4} {
		if c[bound] != want {
			t.Errorf("le=%g: %d, want %d", bound, c[bound], want)
		}
	}
	if h.Count != 5 {
		t.Errorf("count %d, want 5", h.Count)
	}
}

// BenchmarkProjectionApply is the fold's cost per event, a job's whole
// life at a time: what following the log costs beside decoding.
func BenchmarkProjectionApply(b *testing.B) {
	lives := make([][]events.Envelope, 1000)
	for i := range lives {
		lives[i] = life(fmt.Sprintf("j%d", i), "alice", events.Succeeded)
	}
	p := NewProjection()
	var seq uint64
	for i := 0; b.Loop(); i++ {
		for _, e := range lives[i%len(lives)] {
			seq++
			e.Seq = seq
			p.Apply(e)
		}
	}
	b.ReportMetric(float64(b.N*7)/b.Elapsed().Seconds(), "events/s")
}

// TestOverrun: a hold open past its job's limit shows by how long, and
// stops showing once released.
func TestOverrun(t *testing.T) {
	t.Parallel()
	p := NewProjection()
	evs := logOf(life("j1", "alice", events.Succeeded)...)
	for _, e := range evs[:4] { // held at 3 s, running; limit 60 s
		p.Apply(e)
	}
	for _, c := range []struct {
		now  float64
		want time.Duration
	}{{10, 0}, {63, 0}, {93, 30 * time.Second}} {
		if got := p.Overrun(t0.Add(time.Duration(c.now * float64(time.Second)))); got != c.want {
			t.Errorf("at %g s: overrun %v, want %v", c.now, got, c.want)
		}
	}
	for _, e := range evs[4:] {
		p.Apply(e)
	}
	if got := p.Overrun(t0.Add(time.Hour)); got != 0 {
		t.Errorf("after the release: overrun %v, want 0", got)
	}
}

// TestProjectionSetsAsideANodesWordAboutAnotherNodesAttempt: a node's
// start and stop of an attempt held on n1, before n1's own, count as set
// aside and change no figure: the job is running and then succeeds as
// n1 says.
func TestProjectionSetsAsideANodesWordAboutAnotherNodesAttempt(t *testing.T) {
	t.Parallel()
	forged := hold1
	forged.Node = "mallory"
	full := life("j1", "alice", events.Succeeded)
	evs := append([]events.Envelope{}, full[:3]...)
	evs = append(evs, at(3.1, "j1", &events.RunStarted{Hold: forged}), at(3.2, "j1", &events.RunStopped{Hold: forged, Outcome: events.Failed}))
	evs = append(evs, full[3:]...)
	p := NewProjection()
	for i, e := range logOf(evs...) {
		p.Apply(e)
		if i == 5 { // n1's start
			if got := p.Figures().Jobs[hold.StateRunning]; got != 1 {
				t.Errorf("after n1's start, %v; want the job running", p.Figures().Jobs)
			}
		}
	}
	f := p.Figures()
	if f.Events[TypeSetAside] != 2 || f.Events[events.TypeRunStopped] != 1 || f.Finished[events.Succeeded] != 1 || f.Finished[events.Failed] != 0 {
		t.Errorf("events %v, finished %v; want mallory's two set aside, n1's stop counted, succeeded", f.Events, f.Finished)
	}
}

func TestProjectionShowsWithdrawnGPUs(t *testing.T) {
	t.Parallel()
	p := NewProjection()
	ann := &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 4, MemoryBytes: gib, GPU: 2,
		Devices: []events.Device{{UUID: "GPU-0"}, {UUID: "GPU-1"}}}
	for i, ev := range []events.Event{ann,
		&events.DeviceWithdrawn{Node: "n1", Boot: "b1", Device: "GPU-1", Reason: "1 compute process(es) still on it (pid 7)", Change: 1},
		&events.DeviceWithdrawn{Node: "n1", Boot: "b0", Device: "GPU-0", Reason: "of an older boot", Change: 1},
	} {
		env := events.New("n1", ev, "e31/test", time.Now())
		env.Seq = uint64(i + 1)
		p.Apply(env)
	}
	if got := p.Figures().Nodes["n1"].Withdrawn; !reflect.DeepEqual(got, map[string]string{"GPU-1": "1 compute process(es) still on it (pid 7)"}) {
		t.Errorf("withdrawn %v, want GPU-1 alone, with why", got)
	}
	env := events.New("n1", &events.DeviceRestored{Node: "n1", Boot: "b1", Device: "GPU-1", Change: 2}, "e31/test", time.Now())
	env.Seq = 4
	p.Apply(env)
	if got := p.Figures().Nodes["n1"].Withdrawn; len(got) != 0 {
		t.Errorf("withdrawn after the restoration: %v", got)
	}
}
