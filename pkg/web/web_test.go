package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// traceparent is the W3C trace context the test's events carry.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// life is the events of one job that succeeds on node n1.
func life(submitter string) []events.Event {
	hold := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 64 << 20}
	zero := 0
	spec := events.JobSpec{Name: "j-" + submitter, Work: events.Work{Command: []string{"true"}}, Request: events.Request{CPU: 1, MemoryBytes: 64 << 20, LimitSeconds: 60}}
	return []events.Event{
		&events.JobRequested{Submitter: submitter, Spec: spec},
		&events.JobSubmitted{Submitter: submitter, Spec: spec},
		&events.ComputeHeld{Hold: hold, Submitter: submitter, Spec: spec},
		&events.RunStarted{Hold: hold, Isolation: events.IsolationSandbox},
		&events.RunStopped{Hold: hold, Outcome: events.Succeeded, ExitCode: &zero},
		&events.OutputReturned{Hold: hold, Outcome: events.Succeeded},
		&events.ComputeReleased{Hold: hold, Outcome: events.Succeeded, Final: true},
	}
}

// publish stores evs about subject as the services would, each with a
// traceparent header.
func publish(t *testing.T, js jetstream.JetStream, subject string, evs ...events.Event) {
	t.Helper()
	publishAgain(t, js, subject, false, evs...)
}

// publishAgain is publish; with again, the events are stored even if they
// were before, as past the stream's duplicate window.
func publishAgain(t *testing.T, js jetstream.JetStream, subject string, again bool, evs ...events.Event) {
	t.Helper()
	ctx := natstest.Context(t, 10*time.Second)
	for _, ev := range evs {
		m, err := events.New(subject, ev, "test", time.Now()).Msg()
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Set("traceparent", traceparent)
		if again {
			m.Header.Del(events.HeaderMsgID)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %T: %v", ev, err)
		}
	}
}

// start runs a page of the log js reads until the test ends.
func start(t *testing.T, js jetstream.JetStream, cfg Config) *Page {
	t.Helper()
	cfg.JS = js
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return p
}

// waitFor waits, on the page's own notice of change, until cond holds.
func waitFor(t *testing.T, p *Page, what string, cond func(v *view) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ch, _ := p.watch()
		p.mu.Lock()
		ok := cond(p.v)
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the page never showed %s", what)
		}
	}
}

// get asks h for path as a browser on host would, with extra headers.
func get(t *testing.T, srv *httptest.Server, path string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestThePageFollowsAJobsLife(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	p := start(t, js, Config{TraceURL: "http://tracing.example/trace/{trace}"})
	publish(t, js, "n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 2, MemoryBytes: 1 << 30, Isolation: events.IsolationSandbox})
	evs := life("alice")
	publish(t, js, "job-1", evs[:3]...)
	waitFor(t, p, "job-1 held", func(v *view) bool { return v.jobs["job-1"] != nil && v.jobs["job-1"].State == "held" })
	publish(t, js, "job-1", evs[3:]...)
	waitFor(t, p, "job-1 succeeded", func(v *view) bool { return v.jobs["job-1"].Status() == "succeeded" })

	p.mu.Lock()
	j := *p.v.jobs["job-1"]
	finished := 0
	for _, m := range p.v.minutes {
		finished += m.Finished
	}
	p.mu.Unlock()
	if len(j.Timeline) != len(evs) || j.Timeline[2].Type != "ComputeHeld" || j.Timeline[2].Time.IsZero() {
		t.Errorf("timeline: %+v", j.Timeline)
	}
	if j.Trace != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %q, want the traceparent's", j.Trace)
	}
	if finished != 1 {
		t.Errorf("%d jobs finished in the history, want 1", finished)
	}
	// The same ending stored again (past the duplicate window) ends
	// nothing twice.
	publishAgain(t, js, "job-1", true, evs[len(evs)-1])
	waitFor(t, p, "the repeat", func(v *view) bool { return len(v.jobs["job-1"].Timeline) == len(evs)+1 })
	p.mu.Lock()
	finished = 0
	for _, m := range p.v.minutes {
		finished += m.Finished
	}
	p.mu.Unlock()
	if finished != 1 {
		t.Errorf("a repeated release counted again: %d finished", finished)
	}

	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	code, body, h := get(t, srv, "/")
	if code != http.StatusOK || !strings.Contains(body, `data-job="job-1"`) || !strings.Contains(body, `data-state="succeeded"`) {
		t.Errorf("GET /: %d\n%s", code, body)
	}
	if !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("no Content-Security-Policy: %v", h)
	}
	// The job's page links its trace; the ledger is not running here, and
	// the page says so rather than fail.
	code, body, _ = get(t, srv, "/job/job-1")
	if code != http.StatusOK || !strings.Contains(body, `href="http://tracing.example/trace/4bf92f3577b34da6a3ce929d0e0e4736"`) ||
		!strings.Contains(body, "ComputeReleased") || !strings.Contains(body, "The ledger did not answer") {
		t.Errorf("GET /job/job-1: %d\n%s", code, body)
	}
	code, body, _ = get(t, srv, "/", fragmentHeader, "1")
	if code != http.StatusOK || strings.Contains(body, "<html") || !strings.Contains(body, "job-1") {
		t.Errorf("the fragment the script fetches: %d\n%s", code, body)
	}
	// Open on loopback only: a name that resolves here by DNS rebinding is
	// not a loopback name.
	if code, _, _ := get(t, srv, "/", "Host", "evil.example:8031"); code != http.StatusForbidden {
		t.Errorf("GET / with Host evil.example: %d, want 403", code)
	}
}

func TestViewersSeeTheirOwnJobs(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	p := start(t, js, Config{Token: "op-secret", Viewers: map[string]string{"alice-secret": "alice", "bob-secret": "bob"}})
	publish(t, js, "job-a", life("alice")[:2]...)
	publish(t, js, "job-b", life("bob")[:2]...)
	waitFor(t, p, "both jobs", func(v *view) bool { return v.jobs["job-a"] != nil && v.jobs["job-b"] != nil })
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

	if code, _, h := get(t, srv, "/"); code != http.StatusSeeOther || h.Get("Location") != "/login" {
		t.Errorf("GET / without a token: %d to %q, want 303 to /login", code, h.Get("Location"))
	}
	if code, _, _ := get(t, srv, "/", bearer("wrong")...); code != http.StatusUnauthorized {
		t.Errorf("GET / with a wrong token: %d, want 401", code)
	}
	_, body, _ := get(t, srv, "/", bearer("alice-secret")...)
	if !strings.Contains(body, "job-a") || strings.Contains(body, "job-b") || strings.Contains(body, ">bob<") {
		t.Errorf("alice's list shows other than her jobs:\n%s", body)
	}
	if code, body, _ := get(t, srv, "/job/job-b", bearer("alice-secret")...); code != http.StatusNotFound || strings.Contains(body, "bob") {
		t.Errorf("alice asking for bob's job: %d\n%s", code, body)
	}
	for _, path := range []string{"/pool", "/audit"} {
		if code, _, _ := get(t, srv, path, bearer("alice-secret")...); code != http.StatusForbidden {
			t.Errorf("alice asking for %s: %d, want 403", path, code)
		}
	}
	for _, tok := range []string{"op-secret"} {
		if _, body, _ := get(t, srv, "/", bearer(tok)...); !strings.Contains(body, "job-a") || !strings.Contains(body, "job-b") {
			t.Errorf("the operator does not see every job:\n%s", body)
		}
	}

	// A browser logs in with the form; the cookie then shows who it is.
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	form := url.Values{"token": {"bob-secret"}}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srv.URL)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == cookieName {
			cookie = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("POST /login: %d, cookie %+v", resp.StatusCode, cookie)
	}
	if _, body, _ := get(t, srv, "/", "Cookie", cookie.Name+"="+cookie.Value); !strings.Contains(body, "job-b") || strings.Contains(body, "job-a") {
		t.Errorf("bob's list after logging in:\n%s", body)
	}
	// Another site's form cannot make a logged-in operator's browser run
	// the audit: its Origin is not the page's.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/audit", nil)
	req.Header.Set("Origin", "https://evil.example")
	req.AddCookie(&http.Cookie{Name: cookieName, Value: "op-secret"})
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /audit from another origin: %d, want 403", resp.StatusCode)
	}
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	for tp, want := range map[string]string{
		traceparent: "4bf92f3577b34da6a3ce929d0e0e4736",
		"":          "",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "",
		"garbage": "",
	} {
		if got := traceID(tp); got != want {
			t.Errorf("traceID(%q) = %q, want %q", tp, got, want)
		}
	}
}

// TestAJobsPageShowsAJobJustLogged: the page of a job submitted an instant
// ago (opened from the id submit printed) shows the job, even when the
// page has not yet read what was logged: here it never follows the log on
// its own (no Run), so only the request's own read can find the job.
func TestAJobsPageShowsAJobJustLogged(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	p, err := New(Config{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	publish(t, js, "job-new", life("alice")[:2]...)
	if code, body, _ := get(t, srv, "/job/job-new"); code != http.StatusOK || !strings.Contains(body, "JobSubmitted") {
		t.Errorf("GET /job/job-new just after it was logged: %d\n%s", code, body)
	}
	if code, _, _ := get(t, srv, "/job/job-none"); code != http.StatusNotFound {
		t.Errorf("GET /job/job-none, never logged: %d, want 404", code)
	}
}
