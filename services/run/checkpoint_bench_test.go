package run_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
)

// BenchmarkCheckpoint1GiB measures what a save of a 1 GiB checkpoint folder
// costs a job in the sandbox on a btrfs job disk, while the job keeps
// writing: how long its processes are frozen for the snapshot just after
// it wrote the GiB (pause-ms) and again after the upload (pause-again-ms),
// the first upload from the snapshot into a JetStream object store, where
// every byte is new (first-s, first-MB/s), and a save of the folder
// unchanged (unchanged-s): with the digests remembered (stage.HashCache),
// a stat and a look-up in the store per file. Run it alone:
//
//	go test -run '^$' -bench Checkpoint1GiB -benchtime 1x ./services/run/
func BenchmarkCheckpoint1GiB(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the sandbox needs root")
	}
	const size = 1 << 30
	srv := natstest.Start(b)
	js := srv.JetStream(b)
	ctx := context.Background()
	exec, err := run.OpenExecutorWith(run.ExecSandbox, b.TempDir(), 4<<30, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer exec.(io.Closer).Close()
	var pause, pause2, first, unchanged time.Duration
	var n atomic.Int64
	for b.Loop() {
		// 64 files of 16 MiB, then a loop that keeps writing a small file
		// until it is stopped: a job busy while it is saved.
		xjob, err := exec.Prepare(ctx, executor.Spec{JobID: "bench-ckpt", Attempt: int(n.Add(1)), Command: []string{"/bin/sh", "-c", `
mkdir -p "$E31_OUTPUT/ckpt"
for i in $(seq 1 64); do head -c 16777216 /dev/urandom > "$E31_OUTPUT/ckpt/part-$i"; done
touch "$E31_OUTPUT/ready"
i=0; while :; do i=$((i+1)); echo $i > "$E31_OUTPUT/busy"; done`},
			CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 2 << 30, Limit: 10 * time.Minute, Grace: time.Second,
			Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			b.Fatal(err)
		}
		jobCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { _, err := xjob.Run(jobCtx); done <- err }()
		ready := filepath.Join(xjob.Dirs().OutDir, "ready")
		for {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			select {
			case err := <-done:
				b.Fatalf("the job ended before it wrote its checkpoint: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		// Every round uploads into an empty bucket of its own.
		bucket := "bench-" + strconv.FormatInt(n.Load(), 10)
		obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket})
		if err != nil {
			b.Fatal(err)
		}
		store := stage.NewObjectStore(obs)
		snap := xjob.(executor.Snapshotter)
		out, paused, remove, err := snap.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		pause += paused
		start := time.Now()
		hashes := stage.NewHashCache()
		ref, err := stage.UploadCached(ctx, store, filepath.Join(out, "ckpt"), nil, hashes)
		first += time.Since(start)
		if err != nil || ref.Bytes != size {
			b.Fatalf("upload: %v (%d bytes)", err, ref.Bytes)
		}
		if err := remove(); err != nil {
			b.Fatal(err)
		}
		out, paused, remove, err = snap.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		pause2 += paused
		start = time.Now()
		again, err := stage.UploadCached(ctx, store, filepath.Join(out, "ckpt"), nil, hashes)
		unchanged += time.Since(start)
		if err != nil || again.Digest != ref.Digest {
			b.Fatalf("second upload: %v", err)
		}
		if err := remove(); err != nil {
			b.Fatal(err)
		}
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if err := xjob.Release(); err != nil {
			b.Fatal(err)
		}
		if err := js.DeleteObjectStore(ctx, bucket); err != nil {
			b.Fatal(err)
		}
	}
	per := float64(b.N)
	b.ReportMetric(float64(pause.Microseconds())/1000/per, "pause-ms")
	b.ReportMetric(float64(pause2.Microseconds())/1000/per, "pause-again-ms")
	b.ReportMetric(first.Seconds()/per, "first-s")
	b.ReportMetric(size/(1<<20)/(first.Seconds()/per), "first-MB/s")
	b.ReportMetric(unchanged.Seconds()/per, "unchanged-s")
}
