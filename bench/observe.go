package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/e31net/e31/pkg/trace"
)

// ObserveOptions is what Observe compares.
type ObserveOptions struct {
	// Pairs is how many runs with the operator's view off, and as many on.
	Pairs int
	// Jobs is the burst of each run.
	Jobs int
	// Sync and Executor are as in LifeOptions.
	Sync, Executor string
	// Logger is the logger of the systems under measure; nil discards.
	Logger *slog.Logger
}

// Observe measures what watching e31 costs: runs of Life's burst with
// metrics and tracing off and on, alternated in pairs whose order swaps
// each time (off on, on off, …) so that a machine that slows or speeds up
// during the run weighs on both alike. "On" is everything an operator turns
// on: every handler and the scheduler observed, the registry gathered as
// deploy/'s Prometheus scrapes it, and every span exported over OTLP/HTTP,
// to OTEL_EXPORTER_OTLP_ENDPOINT when it is set, else to a receiver that
// Observe starts in this process and that reads every request and answers
// as a collector does (what a collector does with the spans is not e31's
// cost). The summary's cost_pct is one minus the mean of the pairs' on/off
// ratios of jobs per second, in percent; spread_pct is the pairs' standard
// deviation of it. cpu_cost_pct is the same for this process's CPU time per
// job (every service and the embedded server; the receiver's reading too,
// when it is here): on a machine others share, the steadier figure.
func Observe(ctx context.Context, out io.Writer, o ObserveOptions) error {
	if o.Pairs <= 0 || o.Jobs <= 0 {
		return fmt.Errorf("%w: --pairs and --jobs must be positive", ErrUsage)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	endpoint := trace.ConfigFromEnv(os.Getenv).Endpoint
	var received *atomic.Int64
	if endpoint == "" {
		url, got, stop, err := otlpSink()
		if err != nil {
			return err
		}
		defer stop()
		// The exporter reads its endpoint from the standard variable;
		// setting it here is how Setup is pointed at the sink.
		os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
		defer os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		endpoint = url + " (a receiver in this process)"
		received = got
	}
	fmt.Fprintf(out, "e31 bench observe: %d pairs of %d-job bursts, metrics and tracing off and on; spans to %s\n", o.Pairs, o.Jobs, endpoint)
	one := func(on bool) (lifeResult, error) {
		lo := LifeOptions{Jobs: o.Jobs, Idle: 5, Sync: o.Sync, Executor: o.Executor, Nodes: 1, NoFloor: true,
			Metrics: on, Logger: o.Logger}
		if !on {
			return life(ctx, io.Discard, lo)
		}
		shutdown, err := trace.Setup(ctx, trace.ConfigFromEnv(os.Getenv), "e31-bench")
		if err != nil {
			return lifeResult{}, err
		}
		r, err := life(ctx, io.Discard, lo)
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if ferr := shutdown(flushCtx); err == nil && ferr != nil {
			err = fmt.Errorf("bench: flush spans: %w", ferr)
		}
		return r, err
	}
	var offs, ons, ratios, cpuRatios []float64
	var offCPU, onCPU time.Duration
	for i := range o.Pairs {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		var off, on lifeResult
		for _, watched := range order {
			r, err := one(watched)
			if err != nil {
				return err
			}
			if watched {
				on = r
			} else {
				off = r
			}
		}
		offs, ons, ratios = append(offs, off.perSec), append(ons, on.perSec), append(ratios, on.perSec/off.perSec)
		cpuRatios = append(cpuRatios, float64(on.cpuPerJob)/float64(off.cpuPerJob))
		offCPU, onCPU = offCPU+off.cpuPerJob, onCPU+on.cpuPerJob
		fmt.Fprintf(out, "pair %d: off %.1f jobs/s %.2f cpu-ms/job, on %.1f jobs/s %.2f cpu-ms/job, on/off %.3f\n",
			i+1, off.perSec, ms(off.cpuPerJob), on.perSec, ms(on.cpuPerJob), on.perSec/off.perSec)
	}
	cpuMean, _ := meanSD(cpuRatios)
	mean, sd := meanSD(ratios)
	// What the receiver in this process was sent, so that a run whose
	// spans went nowhere cannot pass for a cheap one; -1: another endpoint.
	sent := int64(-1)
	if received != nil {
		sent = received.Load()
	}
	fmt.Fprintf(out, "bench-observe pairs=%d jobs=%d off_jobs_per_s=%.1f on_jobs_per_s=%.1f cost_pct=%.1f spread_pct=%.1f off_median=%.1f on_median=%.1f otlp_bytes=%d sync=%s executor=%s off_cpu_ms_per_job=%.2f on_cpu_ms_per_job=%.2f cpu_cost_pct=%.1f\n",
		o.Pairs, o.Jobs, avg(offs), avg(ons), 100*(1-mean), 100*sd, median(offs), median(ons), sent, o.Sync, o.Executor,
		ms(offCPU/time.Duration(o.Pairs)), ms(onCPU/time.Duration(o.Pairs)), 100*(cpuMean-1))
	return nil
}

// otlpSink is an OTLP/HTTP endpoint on loopback that reads every export
// and answers it with an empty success, as a collector does; received
// counts the bytes of the exports.
func otlpSink() (url string, received *atomic.Int64, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, fmt.Errorf("bench: OTLP receiver: %w", err)
	}
	received = new(atomic.Int64)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return "http://" + l.Addr().String(), received, func() { _ = srv.Close(); <-done }, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func avg(xs []float64) float64 {
	m, _ := meanSD(xs)
	return m
}

func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	if len(xs) > 1 {
		sd = math.Sqrt(sd / float64(len(xs)-1))
	}
	return mean, sd
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
