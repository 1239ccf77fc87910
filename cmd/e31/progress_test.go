package main

import (
	"bytes"
	"sync"
	"testing"
)

// TestABarTakesAddsFromSeveralGoroutines: files move in parallel, so a
// phase's Adds come from several goroutines at once (stage.Progress); the
// bar relies on progressbar's own lock for them (run with -race).
func TestABarTakesAddsFromSeveralGoroutines(t *testing.T) {
	var out bytes.Buffer
	b := &bar{w: &out}
	for range 2 {
		b.Start(1000, "upload")
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				for range 10 {
					b.Add(10)
				}
			})
		}
		wg.Wait()
		b.Done()
	}
	if b.pb.State().CurrentNum != 1000 {
		t.Errorf("the bar counted %d bytes of 1000", b.pb.State().CurrentNum)
	}
}
