package bench

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// profilePath is where the CPU profile of what is named goes: nowhere if
// no profile was asked for.
func profilePath(profile, what string) string {
	if profile == "" {
		return ""
	}
	return profile + "." + what
}

// startCPUProfile profiles the process's CPU to path until stop is
// called (once or more); with no path, stop does nothing. Every bench's
// --cpuprofile goes through it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes the live heap, after a collection, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeAllocs writes the allocation profile of the process so far.
// It collects first: the profile is as of the last collection.
func writeAllocs(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
