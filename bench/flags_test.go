package bench

import (
	"errors"
	"flag"
	"io"
	"testing"
)

// The flags read sizes as a job file writes them, keep their defaults, and
// Check refuses what cannot be measured as ErrUsage, saying only what.
func TestFlagsAndCheck(t *testing.T) {
	var o StageOptions
	fs := flag.NewFlagSet("stage", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.Flags(fs)
	if err := o.Check(); err != nil || o.Large != 1<<30 || o.SmallSize != 4<<10 || o.SmallFiles != 10000 {
		t.Fatalf("defaults %+v: %v", o, err)
	}
	if err := fs.Parse([]string{"--large", "2MiB", "--small-files", "0"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Check(); o.Large != 2<<20 || !errors.Is(err, ErrUsage) || err.Error() != "--large, --small-files and --small-size must be positive" {
		t.Errorf("%+v: %v, want ErrUsage naming the flags", o, err)
	}
	if err := fs.Parse([]string{"--small-size", "lots"}); err == nil {
		t.Error("--small-size lots was taken")
	}
	var l LedgerOptions
	fs = flag.NewFlagSet("ledger", flag.ContinueOnError)
	l.Flags(fs)
	if err := fs.Parse([]string{"--events", "0"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(); !errors.Is(err, ErrUsage) {
		t.Errorf("--events 0: %v, want ErrUsage", err)
	}
}
