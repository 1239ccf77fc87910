package output_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/output"
)

var hold1 = events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 30, DiskBytes: 1 << 20}

var (
	csv    = events.OutputFile{Path: "result.csv", Bytes: 10, Digest: "sha256:aa"}
	runLog = events.OutputFile{Path: "run.log", Bytes: 5, Digest: "sha256:bb"}
)

// stopped is a RunStopped of attempt 1 that declared a required result.csv
// and an optional run.log.
func stopped(outcome events.Outcome, reason string, files []events.OutputFile, missing ...string) events.RunStopped {
	var bytes int64
	for _, f := range files {
		bytes += f.Bytes
	}
	if missing == nil {
		missing = []string{}
	}
	return events.RunStopped{Hold: hold1, Outcome: outcome, Reason: reason,
		Output: events.Collected{Files: files, Missing: missing, Bytes: bytes,
			Declared: []events.OutputDecl{{Path: "result.csv", Required: true}, {Path: "run.log", Required: false}}}}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	both := []events.OutputFile{csv, runLog}
	tests := []struct {
		name    string
		stopped events.RunStopped
		damaged []string
		after   []events.Event
		want    []events.Event // nil: nothing to append
	}{
		{
			name:    "succeeded with every output: returned as succeeded",
			stopped: stopped(events.Succeeded, "", both),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Succeeded,
				Files: both, Bytes: 15, Missing: []string{}}},
		},
		{
			name:    "succeeded without a required output: failed, naming it",
			stopped: stopped(events.Succeeded, "", []events.OutputFile{runLog}, "result.csv"),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Failed,
				Reason: "required output missing: result.csv",
				Files:  []events.OutputFile{runLog}, Bytes: 5, Missing: []string{"result.csv"}}},
		},
		{
			name:    "succeeded without an optional output: still succeeded, listing it",
			stopped: stopped(events.Succeeded, "", []events.OutputFile{csv}, "run.log"),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Succeeded,
				Files: []events.OutputFile{csv}, Bytes: 10, Missing: []string{"run.log"}}},
		},
		{
			name: "a missing output of a stop that declared nothing counts as required",
			stopped: func() events.RunStopped {
				s := stopped(events.Succeeded, "", nil, "result.csv")
				s.Output.Declared = nil
				return s
			}(),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Failed,
				Reason: "required output missing: result.csv", Files: []events.OutputFile{}, Missing: []string{"result.csv"}}},
		},
		{
			name:    "ran past its limit: what it had is returned, partial",
			stopped: stopped(events.LimitExceeded, "ran past its limit of 10m0s", []events.OutputFile{runLog}, "result.csv"),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.LimitExceeded, Reason: "ran past its limit of 10m0s",
				Files: []events.OutputFile{runLog}, Bytes: 5, Partial: true, Missing: []string{"result.csv"}}},
		},
		{
			name:    "out of memory: partial",
			stopped: stopped(events.OutOfMemory, "killed: out of memory", both),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.OutOfMemory, Reason: "killed: out of memory",
				Files: both, Bytes: 15, Partial: true, Missing: []string{}}},
		},
		{
			name:    "disk exceeded: partial",
			stopped: stopped(events.DiskExceeded, "disk full", []events.OutputFile{runLog}, "result.csv"),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.DiskExceeded, Reason: "disk full",
				Files: []events.OutputFile{runLog}, Bytes: 5, Partial: true, Missing: []string{"result.csv"}}},
		},
		{
			name:    "cancelled: partial",
			stopped: stopped(events.Cancelled, "cancelled", []events.OutputFile{runLog}, "result.csv"),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Cancelled, Reason: "cancelled",
				Files: []events.OutputFile{runLog}, Bytes: 5, Partial: true, Missing: []string{"result.csv"}}},
		},
		{
			name:    "node lost: partial",
			stopped: stopped(events.NodeLost, "the node shut down while the job ran", nil, "result.csv", "run.log"),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.NodeLost, Reason: "the node shut down while the job ran",
				Files: []events.OutputFile{}, Partial: true, Missing: []string{"result.csv", "run.log"}}},
		},
		{
			name:    "exited non-zero: failed, not partial: it ran to its end",
			stopped: stopped(events.Failed, "exited with code 3", []events.OutputFile{runLog}, "result.csv"),
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Failed, Reason: "exited with code 3",
				Files: []events.OutputFile{runLog}, Bytes: 5, Missing: []string{"result.csv"}}},
		},
		{
			name:    "a damaged file is not returned, and a success without it fails",
			stopped: stopped(events.Succeeded, "", both),
			damaged: []string{"run.log"},
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Failed,
				Reason: "output failed verification: run.log",
				Files:  []events.OutputFile{csv}, Bytes: 10, Missing: []string{"run.log"}}},
		},
		{
			name:    "damaged and missing: both named",
			stopped: stopped(events.Succeeded, "", []events.OutputFile{runLog}, "result.csv"),
			damaged: []string{"run.log"},
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Failed,
				Reason: "output failed verification: run.log; required output missing: result.csv",
				Files:  []events.OutputFile{}, Missing: []string{"result.csv", "run.log"}}},
		},
		{
			name:    "a damaged file of a failed job is not returned; the outcome stands",
			stopped: stopped(events.Failed, "exited with code 1", both),
			damaged: []string{"result.csv"},
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Failed, Reason: "exited with code 1",
				Files: []events.OutputFile{runLog}, Bytes: 5, Missing: []string{"result.csv"}}},
		},
		{
			name:    "already returned for this attempt: nothing",
			stopped: stopped(events.Succeeded, "", both),
			after:   []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Succeeded, Files: both}},
			want:    nil,
		},
		{
			name:    "a return of another attempt does not count",
			stopped: stopped(events.Succeeded, "", both),
			after:   []events.Event{&events.OutputReturned{Hold: events.Hold{Attempt: 2, Node: "n2"}, Outcome: events.NodeLost}},
			want: []events.Event{&events.OutputReturned{Hold: hold1, Outcome: events.Succeeded,
				Files: both, Bytes: 15, Missing: []string{}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var after []events.Envelope
			for i, ev := range tt.after {
				env := events.New("job-1", ev, "e31/test", time.Unix(int64(i), 0))
				env.Seq = uint64(10 + i)
				after = append(after, env)
			}
			got := output.Decide(tt.stopped, tt.damaged, after)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}
