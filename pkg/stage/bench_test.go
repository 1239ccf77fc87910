package stage_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
)

// freshStore empties the bucket, so that every iteration sends everything
// instead of finding it stored.
func freshStore(b *testing.B, js jetstream.JetStream) stage.Store {
	b.Helper()
	ctx := natstest.Context(b, time.Minute)
	if err := js.DeleteObjectStore(ctx, events.DataBucket); err != nil {
		b.Fatal(err)
	}
	bucket, err := js.CreateObjectStore(ctx, events.DataBucketConfig(events.StreamOptions{}))
	if err != nil {
		b.Fatal(err)
	}
	return stage.NewObjectStore(bucket)
}

// BenchmarkUploadLarge uploads a 256 MiB file (16 parts) into an empty
// bucket: the hash pass and the transfer.
func BenchmarkUploadLarge(b *testing.B) {
	const size = 256 << 20
	js := natstest.Start(b).JetStream(b)
	ctx := natstest.Context(b, time.Hour)
	src := filepath.Join(b.TempDir(), "large")
	writeRandomFile(b, src, size, 1)
	b.SetBytes(size)
	for b.Loop() {
		b.StopTimer()
		s := freshStore(b, js)
		b.StartTimer()
		if _, err := stage.Upload(ctx, s, src, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDownloadLarge downloads the same file, verifying it.
func BenchmarkDownloadLarge(b *testing.B) {
	const size = 256 << 20
	js := natstest.Start(b).JetStream(b)
	ctx := natstest.Context(b, time.Hour)
	src := filepath.Join(b.TempDir(), "large")
	writeRandomFile(b, src, size, 1)
	s := freshStore(b, js)
	ref, err := stage.Upload(ctx, s, src, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		if err := stage.Download(ctx, s, ref, filepath.Join(dir, fmt.Sprint(i)), nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.Remove(filepath.Join(dir, fmt.Sprint(i)))
		b.StartTimer()
	}
}

// BenchmarkUploadSmallFiles uploads a folder of 2,000 files of about 4 KiB
// into an empty bucket, and reports files/s as well as MB/s.
func BenchmarkUploadSmallFiles(b *testing.B) {
	const n, size = 2000, 4096
	js := natstest.Start(b).JetStream(b)
	ctx := natstest.Context(b, time.Hour)
	src := smallFiles(b, n, size, 1)
	var total int64
	for b.Loop() {
		b.StopTimer()
		s := freshStore(b, js)
		b.StartTimer()
		ref, err := stage.Upload(ctx, s, src, nil)
		if err != nil {
			b.Fatal(err)
		}
		total = ref.Bytes
	}
	b.SetBytes(total)
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
}

// BenchmarkDownloadSmallFiles downloads that folder, verifying every file.
func BenchmarkDownloadSmallFiles(b *testing.B) {
	const n, size = 2000, 4096
	js := natstest.Start(b).JetStream(b)
	ctx := natstest.Context(b, time.Hour)
	src := smallFiles(b, n, size, 1)
	s := freshStore(b, js)
	ref, err := stage.Upload(ctx, s, src, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(ref.Bytes)
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		if err := stage.Download(ctx, s, ref, filepath.Join(dir, fmt.Sprint(i)), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
}
