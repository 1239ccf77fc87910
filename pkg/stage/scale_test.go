package stage_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
)

// smallFiles writes n files of about size bytes each, spread over folders of
// 100, and returns the folder.
func smallFiles(tb testing.TB, n, size int, seed uint64) string {
	tb.Helper()
	root := filepath.Join(tb.TempDir(), "small")
	r := rand.New(rand.NewPCG(seed, seed))
	buf := make([]byte, size)
	for i := range n {
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		p := filepath.Join(root, fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%05d", i))
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				tb.Fatal(err)
			}
		}
		if err := os.WriteFile(p, buf[:size-i%7], 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}

func TestTenThousandSmallFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("stages 10,000 files; skipped with -short")
	}
	t.Parallel()
	e := newEnv(t)
	const n = 10_000
	src := smallFiles(t, n, 1024, 1)

	start := time.Now()
	ref, err := stage.Upload(e.ctx, e.store, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	up := time.Since(start)
	if ref.Files != n {
		t.Fatalf("ref = %+v", ref)
	}

	start = time.Now()
	if err := stage.Verify(e.ctx, e.store, ref); err != nil {
		t.Fatal(err)
	}
	verify := time.Since(start)

	start = time.Now()
	cs := &countingStore{Store: e.store}
	if _, err := stage.Upload(e.ctx, cs, src, nil); err != nil || cs.puts.Load() != 0 {
		t.Fatalf("re-upload: %v, %d puts", err, cs.puts.Load())
	}
	again := time.Since(start)

	dest := filepath.Join(t.TempDir(), "small")
	start = time.Now()
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	down := time.Since(start)
	t.Logf("%d files: upload %v (%.0f files/s), verify %v, re-upload %v, download %v (%.0f files/s)",
		n, up.Round(time.Millisecond), n/up.Seconds(), verify.Round(time.Millisecond),
		again.Round(time.Millisecond), down.Round(time.Millisecond), n/down.Seconds())

	back, err := stage.Upload(e.ctx, e.store, dest, nil)
	if err != nil || back != ref {
		t.Fatalf("the download hashes to %+v, %v; want %+v", back, err, ref)
	}
}

// peakHeap samples the Go heap in use until stop is called and returns the
// highest value seen. The embedded server runs in this process, so its heap
// counts too.
func peakHeap() (stop func() uint64) {
	var (
		mu   sync.Mutex
		peak uint64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		peak = max(peak, ms.HeapInuse)
		mu.Unlock()
	}
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sample()
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		sample()
		return peak
	}
}

// writeRandomFile writes size pseudo-random bytes to path, a buffer at a
// time, and returns their digest.
func writeRandomFile(tb testing.TB, path string, size int64, seed uint64) string {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	src := rand.NewChaCha8([32]byte{byte(seed)})
	if _, err := io.CopyN(io.MultiWriter(f, h), src, size); err != nil {
		tb.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func fileDigest(tb testing.TB, path string) string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		tb.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// TestHugeFileFlatMemory round-trips 1 GiB and checks that the heap of the
// process that stages stays under 100 MiB. The NATS server runs in a child
// process, as it does in production (the CLI and a RUN node talk to a server
// elsewhere): its file store caches blocks of 8 MiB, and in this process they
// would be counted against staging. The test needs about 3 GiB of disk and
// takes about 20 seconds on two cores, so it runs with the rest (make test)
// and is skipped with -short or E31_STAGE_HUGE=0:
//
//	go test -run HugeFile -v ./stage/
//
// E31_STAGE_HUGE=embedded runs the server in this process instead, to see
// what it adds.
func TestHugeFileFlatMemory(t *testing.T) {
	mode := "a child process"
	if os.Getenv("E31_STAGE_HUGE") == "embedded" {
		mode = "this process"
	}
	if testing.Short() || os.Getenv("E31_STAGE_HUGE") == "0" {
		t.Skip("round-trips 1 GiB; skipped with -short or E31_STAGE_HUGE=0")
	}
	const size = 1 << 30
	const limit = 100 << 20
	ctx := natstest.Context(t, 10*time.Minute)
	var js jetstream.JetStream
	if mode == "this process" {
		js = natstest.Start(t).JetStream(t)
	} else {
		js = childServer(t)
	}
	bucket, err := js.CreateOrUpdateObjectStore(ctx, events.DataBucketConfig(events.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	s := stage.NewObjectStore(bucket)

	src := filepath.Join(t.TempDir(), "huge")
	want := writeRandomFile(t, src, size, 7)
	runtime.GC()

	stop := peakHeap()
	start := time.Now()
	ref, err := stage.Upload(ctx, s, src, nil)
	upTime := time.Since(start)
	upPeak := stop()
	if err != nil {
		t.Fatal(err)
	}
	if ref.Digest != want || ref.Bytes != size {
		t.Fatalf("ref = %+v, want %s", ref, want)
	}

	runtime.GC()
	stop = peakHeap()
	dest := filepath.Join(t.TempDir(), "huge")
	start = time.Now()
	err = stage.Download(ctx, s, ref, dest, nil)
	downTime := time.Since(start)
	downPeak := stop()
	if err != nil {
		t.Fatal(err)
	}
	if got := fileDigest(t, dest); got != want {
		t.Fatalf("downloaded %s, want %s", got, want)
	}
	t.Logf("server in %s, part size %d MiB: upload %v (%.0f MB/s, hash pass included), heap peak %d MiB; download %v (%.0f MB/s), heap peak %d MiB",
		mode, stage.PartSize>>20, upTime.Round(time.Millisecond), size/upTime.Seconds()/1e6, upPeak>>20,
		downTime.Round(time.Millisecond), size/downTime.Seconds()/1e6, downPeak>>20)
	if mode != "this process" && (upPeak > limit || downPeak > limit) {
		t.Errorf("heap peaked at %d MiB uploading, %d MiB downloading; limit %d MiB", upPeak>>20, downPeak>>20, limit>>20)
	}
}

// serveEnv makes the test binary a NATS server (see TestMain).
const serveEnv = "E31_STAGE_TEST_SERVE"

// TestMain lets the test binary serve NATS for TestHugeFileFlatMemory.
func TestMain(m *testing.M) {
	if dir := os.Getenv(serveEnv); dir != "" {
		serve(dir)
		return
	}
	os.Exit(m.Run())
}

// serve runs a server on dir, prints its URL and stops when stdin closes,
// that is when the test that started it ends.
func serve(dir string) {
	srv, err := broker.Start(broker.Config{Dir: dir, Sync: broker.SyncInterval, Name: "stage-test"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(srv.ClientURL())
	// The parent closes stdin to stop it: whatever the read says, stop.
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// childServer starts a server in a child process and connects to it over
// TCP, with the e31 streams set up.
func childServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the child server did not stop cleanly: %v", err)
		}
	})
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child server: %v", err)
	}
	nc, err := nats.Connect(strings.TrimSpace(url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := natstest.Context(t, time.Minute)
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	return js
}
