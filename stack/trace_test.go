package stack

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/trace"
	"github.com/e31net/e31/services/run"
)

// otlpReceiver is an OTLP/HTTP trace endpoint: it decodes what the
// standard exporter sends, as a collector would, and keeps the spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range export.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			if v := a.Value.GetStringValue(); v != "" {
				return v
			}
			return fmt.Sprint(a.Value.GetIntValue())
		}
	}
	return ""
}

// TestOneTracePerJob submits a job in a caller's trace, as `e31 submit`
// does with TRACEPARENT set, to a whole e31 that exports to a real OTLP
// endpoint, and checks the trace of its life: one trace id on every event
// and every span, each step's span a child of the one that appended the
// event it handled, the sandbox's start and the output's upload spans of
// RUN's. Not parallel: it sets the process's tracer provider.
func TestOneTracePerJob(t *testing.T) {
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	ctx := natstest.Context(t, 2*time.Minute)
	flush, err := trace.Setup(ctx, trace.ConfigFromEnv(os.Getenv), "e31-test")
	if err != nil {
		t.Fatal(err)
	}
	flushed := false
	t.Cleanup(func() {
		if !flushed {
			_ = flush(context.Background())
		}
	})

	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Sync: "interval", Users: []string{"alice"},
		Node: run.Config{CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 256 << 20, ExecutorKind: run.ExecProcess, Grace: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop()
		}
	})
	c, err := client.Connect(ctx, client.Config{URL: s.Broker().ClientURL(), Creds: s.CredsFile("alice"), User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	caller := trace.Context(ctx, events.Trace{Parent: "00-" + traceID + "-" + callerSpan + "-01"})
	spec := events.JobSpec{Name: "traced", Work: events.Work{Command: []string{"/bin/sh", "-c", "echo hello > out/greeting"}},
		Output:  []events.OutputDecl{{Path: "greeting", Required: true}},
		Request: events.Request{CPU: 0.1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, LimitSeconds: 30}}
	job, err := c.Submit(caller, &jobfile.Job{Spec: spec, Paths: map[int]string{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(ctx, job, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != events.Succeeded {
		t.Fatalf("job %s: %s (%s), want succeeded", job, rec.Outcome, rec.Reason)
	}

	// Every event of the job carries the caller's trace id.
	nc, err := s.Connect(Operator, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := connect.Ready(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := bus.ReadJob(ctx, js, job, 1)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, events.Name(e.Type))
		if !strings.HasPrefix(e.Trace.Parent, "00-"+traceID+"-") {
			t.Errorf("%s: %s %q, want the trace %s", e, events.HeaderTraceParent, e.Trace.Parent, traceID)
		}
	}
	if !strings.Contains(strings.Join(types, " "), "ComputeReleased") {
		t.Fatalf("job %s has events %v, no release", job, types)
	}

	// Every span has ended once the services have stopped; flushing sends
	// them all.
	stopped = true
	if err := s.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	flushed = true
	if err := flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}

	recv.mu.Lock()
	spans := recv.spans
	recv.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	var ours []*tracepb.Span
	for _, sp := range spans {
		if attr(sp, "e31.job") != job && sp.Name != "submit" {
			continue
		}
		ours = append(ours, sp)
		byID[hex.EncodeToString(sp.SpanId)] = sp
		if got := hex.EncodeToString(sp.TraceId); got != traceID {
			t.Errorf("span %q is in trace %s, want %s", sp.Name, got, traceID)
		}
	}
	tree := func() string {
		var b bytes.Buffer
		sort.Slice(ours, func(i, j int) bool { return ours[i].StartTimeUnixNano < ours[j].StartTimeUnixNano })
		for _, sp := range ours {
			parent := hex.EncodeToString(sp.ParentSpanId)
			if p := byID[parent]; p != nil {
				parent = p.Name
			}
			fmt.Fprintf(&b, "  %-28s parent %-28s attempt=%s node=%s\n", sp.Name, parent, attr(sp, "e31.attempt"), attr(sp, "e31.node"))
		}
		return b.String()
	}
	t.Logf("spans of job %s:\n%s", job, tree())
	named := func(name string) *tracepb.Span {
		t.Helper()
		var found *tracepb.Span
		for _, sp := range ours {
			if sp.Name == name {
				if found != nil {
					t.Errorf("two spans named %q", name)
				}
				found = sp
			}
		}
		if found == nil {
			t.Fatalf("no span %q among:\n%s", name, tree())
		}
		return found
	}
	childOf := func(child, parent *tracepb.Span) {
		t.Helper()
		if !bytes.Equal(child.ParentSpanId, parent.SpanId) {
			t.Errorf("span %q's parent is %x, want %q (%x)", child.Name, child.ParentSpanId, parent.Name, parent.SpanId)
		}
	}
	submit := named("submit")
	if got := hex.EncodeToString(submit.ParentSpanId); got != callerSpan {
		t.Errorf("submit's parent is %s, want the caller's span %s", got, callerSpan)
	}
	accepted := named("submit JobRequested")
	childOf(accepted, submit)
	// RENT's pool takes note of every event without a span; its
	// decision is the span, in the trace of the event it follows.
	decided := named("rent decide ComputeHeld")
	childOf(decided, accepted)
	ran := named("run ComputeHeld")
	childOf(ran, decided)
	childOf(named("run sandbox start"), ran)
	childOf(named("run job"), ran)
	childOf(named("run output upload"), ran)
	for _, sp := range []*tracepb.Span{decided, ran} {
		if attr(sp, "e31.attempt") != "1" || attr(sp, "e31.node") == "" {
			t.Errorf("span %q: attempt %q node %q, want attempt 1 on a node", sp.Name, attr(sp, "e31.attempt"), attr(sp, "e31.node"))
		}
	}
	output := named("output RunStopped")
	childOf(output, ran)
	childOf(named("output verify"), output)
	var release *tracepb.Span
	for _, sp := range ours {
		if strings.HasPrefix(sp.Name, "release ") && bytes.Equal(sp.ParentSpanId, output.SpanId) {
			release = sp
		}
	}
	if release == nil {
		t.Errorf("no span of RELEASE handling what OUTPUT appended, among:\n%s", tree())
	}
	// Every span but the submission's is a child of one of the job's.
	for _, sp := range ours {
		if sp != submit && byID[hex.EncodeToString(sp.ParentSpanId)] == nil {
			t.Errorf("span %q's parent %x is none of the job's spans", sp.Name, sp.ParentSpanId)
		}
	}
}
