package jobfile

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// A size flag reads what a job file reads, refuses what it refuses, and
// shows its default as people write it.
func TestSizeVar(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var mem, disk int64
	SizeVar(fs, &mem, "memory", 4*GiB, "memory")
	SizeVar(fs, &disk, "disk", 20*GiB, "disk")
	if got := fs.Lookup("memory").DefValue; got != "4GiB" {
		t.Errorf("default shown as %q, want 4GiB", got)
	}
	if err := fs.Parse([]string{"--memory", "1.5GiB"}); err != nil {
		t.Fatal(err)
	}
	if mem != 3*GiB/2 || disk != 20*GiB {
		t.Errorf("memory %d, disk %d", mem, disk)
	}
	err := fs.Parse([]string{"--disk", "2G"})
	if err == nil || !strings.Contains(err.Error(), "GiB") {
		t.Errorf("an ambiguous unit: %v, want refused with what to write instead", err)
	}
	if disk != 20*GiB {
		t.Errorf("a refused size changed the flag: %d", disk)
	}
}
