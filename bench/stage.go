package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// StageOptions is what Stage moves.
type StageOptions struct {
	// Large is the size of the one large file.
	Large int64
	// SmallFiles is the number of small files, of SmallSize bytes each.
	SmallFiles int
	SmallSize  int64
	// Sync is the event store's durability: always (as e31 dev) or interval.
	Sync string
	// Keep keeps the temporary directory.
	Keep bool
}

// stageFigure is one measured transfer.
type stageFigure struct {
	Bytes   int64   `json:"bytes"`
	Files   int     `json:"files"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
}

func figure(bytes int64, files int, d time.Duration) stageFigure {
	return stageFigure{Bytes: bytes, Files: files, Seconds: d.Seconds(), MBps: float64(bytes) / d.Seconds() / 1e6}
}

// stageSummary is the machine-readable last line.
type stageSummary struct {
	Sync        string                 `json:"sync"`
	RawDiskMBps float64                `json:"raw_disk_write_mb_per_s"`
	Large       map[string]stageFigure `json:"large"`
	Small       map[string]stageFigure `json:"small"`
}

// Stage starts an embedded NATS JetStream server in a temporary directory,
// as e31 dev does, and moves one large file and a folder of many small
// files through the data store the way a job's data and output travel
// (stage in: the client uploads, the node downloads; output: the node
// collects, the client fetches), every byte checked against its digest. In
// the same run, on the same disk, it measures the raw write rate. The last
// line it writes is one machine-readable summary.
func Stage(ctx context.Context, out io.Writer, o StageOptions) error {
	large, smallSize := o.Large, o.SmallSize
	if large <= 0 || o.SmallFiles <= 0 || smallSize <= 0 {
		return fmt.Errorf("%w: the large size, the small files and their size must be positive", ErrUsage)
	}
	dir, err := os.MkdirTemp("", "e31-bench-stage-")
	if err != nil {
		return err
	}
	if o.Keep {
		fmt.Fprintf(out, "keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b, err := broker.Start(broker.Config{Dir: filepath.Join(dir, "nats"), Sync: broker.Sync(o.Sync), Name: "e31-bench-stage"})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNATS, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.Shutdown(sctx)
	}()
	nc, err := b.Connect("e31-bench-stage")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := connect.Ready(ctx, nc)
	if err != nil {
		return err
	}
	stores, err := stage.Open(ctx, js)
	if err != nil {
		return err
	}
	store, err := stores.For(ctx, "bench")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "e31 bench stage: one file of %s, %d files of %s, sync=%s, in %s\n",
		client.HumanBytes(large), o.SmallFiles, client.HumanBytes(smallSize), o.Sync, dir)

	// The inputs and the output a job leaves, written before any clock
	// runs. Output differs from input, so that collecting it stores bytes
	// rather than finding them stored.
	rng := rand.NewChaCha8([32]byte{31})
	for _, p := range []string{"in/large.bin", "out-large/large.bin"} {
		if err := writeRandom(filepath.Join(dir, p), large, rng); err != nil {
			return err
		}
	}
	for _, d := range []string{"in/small", "out-small/small"} {
		for i := range o.SmallFiles {
			if err := writeRandom(filepath.Join(dir, d, fmt.Sprintf("d%03d", i/1000), fmt.Sprintf("f%05d", i)), smallSize, rng); err != nil {
				return err
			}
		}
	}

	raw, err := rawWrite(filepath.Join(dir, "raw.bin"), large, rng)
	if err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, "raw.bin"))

	sum := stageSummary{Sync: o.Sync, RawDiskMBps: raw.MBps, Large: map[string]stageFigure{}, Small: map[string]stageFigure{}}
	shapes := []struct {
		name  string
		in    string
		out   string
		files int
		bytes int64
		into  map[string]stageFigure
	}{
		{"large", "in/large.bin", "out-large", 1, large, sum.Large},
		{"small", "in/small", "out-small", o.SmallFiles, int64(o.SmallFiles) * smallSize, sum.Small},
	}
	for _, sh := range shapes {
		t := time.Now()
		ref, err := stage.Upload(ctx, store, filepath.Join(dir, sh.in), nil)
		if err != nil {
			return fmt.Errorf("bench: upload %s: %w", sh.name, err)
		}
		sh.into["upload"] = figure(sh.bytes, sh.files, time.Since(t))

		t = time.Now()
		if err := stage.Download(ctx, store, ref, filepath.Join(dir, "node", sh.name), nil); err != nil {
			return fmt.Errorf("bench: download %s: %w", sh.name, err)
		}
		sh.into["download"] = figure(sh.bytes, sh.files, time.Since(t))

		t = time.Now()
		c, err := stage.Collect(ctx, store, filepath.Join(dir, sh.out), []events.OutputDecl{{Path: "**", Required: true}}, 0)
		if err != nil {
			return fmt.Errorf("bench: collect %s: %w", sh.name, err)
		}
		sh.into["collect"] = figure(sh.bytes, sh.files, time.Since(t))

		t = time.Now()
		if err := stage.FetchDir(ctx, store, c.Manifest, filepath.Join(dir, "fetched", sh.name), nil); err != nil {
			return fmt.Errorf("bench: fetch %s: %w", sh.name, err)
		}
		sh.into["fetch"] = figure(sh.bytes, sh.files, time.Since(t))
	}

	fmt.Fprintf(out, "raw disk write (%s, fsynced):        %7.0f MB/s\n", client.HumanBytes(large), raw.MBps)
	fmt.Fprintf(out, "%-36s %12s %22s\n", "", "one large", fmt.Sprintf("%d small", o.SmallFiles))
	for _, step := range []struct{ key, label string }{
		{"upload", "stage in:  client upload (MB/s)"},
		{"download", "stage in:  node download (MB/s)"},
		{"collect", "output:    node collect (MB/s)"},
		{"fetch", "output:    client fetch (MB/s)"},
	} {
		l, s := sum.Large[step.key], sum.Small[step.key]
		fmt.Fprintf(out, "%-36s %12.0f %12.1f (%6.0f files/s)\n", step.label, l.MBps, s.MBps, float64(s.Files)/s.Seconds)
	}
	return json.NewEncoder(out).Encode(sum)
}

// writeRandom writes size pseudo-random bytes to p and fsyncs it.
func writeRandom(p string, size int64, rng *rand.ChaCha8) error {
	return writeFile(p, size, func(b []byte) { _, _ = rng.Read(b) })
}

// rawWrite measures the disk alone: size bytes from one buffer filled
// beforehand, written in the copy size staging uses, then fsynced.
func rawWrite(p string, size int64, rng *rand.ChaCha8) (stageFigure, error) {
	buf := make([]byte, 256<<10)
	_, _ = rng.Read(buf)
	start := time.Now()
	if err := writeFile(p, size, func([]byte) {}, buf...); err != nil {
		return stageFigure{}, err
	}
	return figure(size, 1, time.Since(start)), nil
}

// writeFile writes size bytes to p, each buffer first filled by fill, and
// fsyncs it. buf, if given, is the buffer.
func writeFile(p string, size int64, fill func([]byte), buf ...byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if buf == nil {
		buf = make([]byte, min(size, 1<<20))
	}
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		fill(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
