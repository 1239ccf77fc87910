package main

import (
	"os"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// TestWritingIsNotMemory: a job that asks for 128 MiB of memory and 1 GiB
// of disk writes 300 MB into /out and succeeds: its writable space is on
// the node's disk, bounded by request.disk, and never counts against its
// memory (in a tmpfs it would have been killed as out_of_memory).
func TestWritingIsNotMemory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root; without it the node runs jobs as plain processes on the node's disk")
	}
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "dd if=/dev/zero of=$E31_OUTPUT/big bs=1M count=300 && ls -l $E31_OUTPUT > $E31_OUTPUT/list.txt"]}
request: {cpu: 1, memory: 128MiB, disk: 1GiB, limit: 2m}
output: [list.txt]
`, nil))
	rec, code := ts.wait(id)
	if code != exitOK || rec.Outcome != events.Succeeded {
		t.Fatalf("outcome %s (%s), exit %d: want succeeded", rec.Outcome, rec.Reason, code)
	}
	if rec.Output.Files != 1 {
		t.Errorf("output %+v, want list.txt", rec.Output)
	}
}
