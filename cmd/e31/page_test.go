package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/stack"
)

// chromium is the browser the page's test drives: Debian's chromium, which
// .ci/run installs. The test fails without it: a page nobody looked at in a
// browser is not tested.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: the page is tested in a real browser (apt-get install chromium; .ci/run does)")
	return ""
}

// artefacts is where the test writes what a person may want to look at
// (screenshots): $E31_ARTEFACTS/<test> when set, else a temporary folder.
func artefacts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if root := os.Getenv("E31_ARTEFACTS"); root != "" {
		dir = filepath.Join(root, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// browser starts a headless chromium for the test and returns its tab's
// context and a function that returns what the page logged as an error so
// far: uncaught exceptions, console.error, and the browser's own errors
// (a failed load, a refused Content-Security-Policy).
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	// The profile is removed once the browser has closed, not by
	// t.TempDir, whose removal races the browser's helper processes.
	profile, err := os.MkdirTemp("", "e31-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // the tests run as root
		chromedp.Flag("headless", "new"),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(profile),
		chromedp.CombinedOutput(os.Stderr),
	)
	var mu sync.Mutex
	var errs []string
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			errs = append(errs, "exception: "+msg)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				errs = append(errs, "console.error: "+strings.Join(args, " "))
			}
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError {
				errs = append(errs, fmt.Sprintf("%s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}
	started, closed := make(chan error, 1), make(chan struct{})
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Cancel closes the browser and waits until it has gone.
		if err := chromedp.Cancel(ctx); err != nil {
			t.Logf("close chromium: %v", err)
		}
		close(closed)
		cancelTab()
		cancelAlloc()
		if err := os.RemoveAll(profile); err != nil {
			t.Logf("remove chromium's profile: %v", err)
		}
	})
	chromedp.ListenTarget(ctx, listen)
	// chromedp starts chromium with Pdeathsig, which the kernel sends when
	// the thread that forked it ends, not the process; the sandbox nodes
	// of e31 dev in this process launch jobs from threads they then throw
	// away, and one of those may be the thread chromium came from. So it
	// is started from a thread held until the browser is closed.
	go func() {
		goruntime.LockOSThread()
		started <- chromedp.Run(ctx, log.Enable(), runtime.Enable())
		<-closed
		goruntime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		t.Fatalf("start chromium: %v", err) // the cleanup lets the thread go
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// TestPageInABrowser opens the page of e31 dev in headless chromium, submits
// a job and a sweep while it is open, and watches them reach succeeded
// without a reload; then it looks at the job's timeline, the pool, the
// ledger's totals and the audit, with a screenshot of each.
func TestPageInABrowser(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, consoleErrors := browser(t)
	shots := artefacts(t)
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, http: httpOptions{addr: "127.0.0.1:0"}})
	base := "http://" + ts.sys.EndpointsAddr()
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}
	run := func(what string, timeout time.Duration, actions ...chromedp.Action) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		began := time.Now()
		if err := chromedp.Run(rctx, actions...); err != nil {
			t.Fatalf("%s: %v (console: %q)", what, err, consoleErrors())
		}
		t.Logf("%s: %s", what, time.Since(began).Round(time.Millisecond))
	}

	// The list, open before anything is submitted; a mark on the window
	// tells a reload (which would drop it) from a live update.
	run("open the jobs", 30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#jobs"),
		chromedp.WaitVisible("#live.on"),
		chromedp.Evaluate(`window.e31Mark = "not reloaded"`, nil),
	)

	job := writeJob(t, "name: page-test\nwork: {command: [/bin/sh, -c, 'echo hello from the page test; sleep 0.5; echo done > $E31_OUTPUT/out.txt']}\n"+
		"request: {cpu: 1, memory: 64MiB, limit: 1m}\noutput: [out.txt]\n", nil)
	out, errOut, code := ts.cli("submit", "--quiet", "--json", job)
	var sub struct{ ID string }
	if err := json.Unmarshal([]byte(out), &sub); code != 0 || err != nil {
		t.Fatalf("e31 submit: exit %d: %s %s", code, out, errOut)
	}
	sweep := writeJob(t, "name: page-sweep\nwork: {command: [/bin/true]}\nrequest: {cpu: 0.5, memory: 32MiB, limit: 1m}\nsweep: {count: 3}\n", nil)
	if _, errOut, code := ts.cliAs("bob", "submit", "--quiet", sweep); code != 0 {
		t.Fatalf("e31 submit sweep: exit %d: %s", code, errOut)
	}
	row := fmt.Sprintf(`tr[data-job=%q]`, sub.ID)
	run("see the job appear and succeed", 90*time.Second,
		chromedp.WaitVisible(row),
		chromedp.WaitVisible(row+` [data-state="succeeded"]`),
		chromedp.WaitVisible(`tr.sweep summary`),
	)
	var mark string
	run("the sweep's jobs succeed", 60*time.Second,
		chromedp.Click(`tr.sweep summary`),
		chromedp.WaitVisible(`tr.sweep details[open] [data-state="succeeded"]`),
		chromedp.Poll(`document.querySelectorAll('tr.sweep details[open] [data-state="succeeded"]').length === 3`, nil),
		chromedp.Evaluate(`window.e31Mark`, &mark),
		shot("jobs"),
	)
	if mark != "not reloaded" {
		t.Errorf("the page was reloaded (mark %q): it must follow the log on its own", mark)
	}

	var timeline string
	run("open the job's page", 30*time.Second,
		chromedp.Click(row+` a`),
		chromedp.WaitVisible(`#timeline li`),
		chromedp.WaitVisible(`#stdout`),
		chromedp.Text(`#timeline`, &timeline),
		shot("job"),
	)
	for _, ev := range []string{"JobRequested", "JobSubmitted", "ComputeHeld", "RunStarted", "RunStopped", "OutputReturned", "ComputeReleased"} {
		if !strings.Contains(timeline, ev) {
			t.Errorf("the timeline has no %s:\n%s", ev, timeline)
		}
	}
	var stdout string
	run("read the job's logs", 10*time.Second, chromedp.Text(`#stdout`, &stdout))
	if !strings.Contains(stdout, "hello from the page test") {
		t.Errorf("the job's page shows stdout %q", stdout)
	}

	// A job no node can hold yet: its page says why it waits, and it
	// moves to cancelled when cancelled, without a reload.
	big := writeJob(t, "name: too-big\nwork: {command: [/bin/true]}\nrequest: {cpu: 8, memory: 64MiB, limit: 1m}\nwait_for_node: true\n", nil)
	out, errOut, code = ts.cli("submit", "--quiet", "--json", big)
	var waiting struct{ ID string }
	if err := json.Unmarshal([]byte(out), &waiting); code != 0 || err != nil {
		t.Fatalf("e31 submit: exit %d: %s %s", code, out, errOut)
	}
	var why string
	// Under keepAlive (20 s), when the page refreshes anyway: a change the
	// page missed fails these steps rather than arrive late.
	const live = 15 * time.Second
	run("see why a job waits", live,
		chromedp.Navigate(base+"/job/"+waiting.ID),
		chromedp.WaitVisible(`#job-state[data-state="waiting"]`),
		chromedp.WaitVisible(`#why`),
		chromedp.Text(`#why`, &why),
		shot("waiting"),
	)
	if why == "" {
		t.Error("the page of a waiting job does not say why it waits")
	}
	if _, errOut, code := ts.cli("cancel", waiting.ID); code != 0 {
		t.Fatalf("e31 cancel: exit %d: %s", code, errOut)
	}
	run("see the cancel", live, chromedp.WaitVisible(`#job-state[data-state="cancelled"]`))

	var nodes, totals string
	run("open the pool", 30*time.Second,
		chromedp.Navigate(base+"/pool"),
		chromedp.WaitVisible(`#nodes tbody tr`),
		chromedp.Text(`#nodes`, &nodes),
		shot("pool"),
	)
	if !strings.Contains(nodes, "up") {
		t.Errorf("the pool shows no node up:\n%s", nodes)
	}
	run("open the ledger", 30*time.Second,
		chromedp.Navigate(base+"/ledger?period=1h"),
		chromedp.WaitVisible(`#totals`),
		chromedp.Text(`#totals`, &totals),
		shot("ledger"),
	)
	if !strings.Contains(totals, "alice") || !strings.Contains(totals, "bob") {
		t.Errorf("the ledger's totals do not show alice and bob:\n%s", totals)
	}
	var tomorrow string
	run("ask the ledger for a period of dates", 30*time.Second,
		chromedp.Navigate(base+"/ledger?since="+time.Now().UTC().Add(24*time.Hour).Format(time.DateOnly)),
		chromedp.WaitVisible(`#totals`),
		chromedp.Text(`#totals`, &tomorrow),
	)
	if strings.Contains(tomorrow, "alice") {
		t.Errorf("the ledger's totals from tomorrow on show alice:\n%s", tomorrow)
	}
	var result string
	run("run the audit", live,
		chromedp.Navigate(base+"/audit"),
		chromedp.WaitVisible(`#head`),
		chromedp.Click(`#run-audit`),
		chromedp.WaitVisible(`#audit-result`),
		chromedp.Text(`#audit-result`, &result),
		shot("audit"),
	)
	if !strings.Contains(result, "audit passed") {
		t.Errorf("the audit from the page: %q", result)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors in the browser:\n%s", strings.Join(errs, "\n"))
	}
	t.Logf("page test took %s", time.Since(start).Round(time.Millisecond))
}

// TestServeWebServesThePage: `e31 serve web` serves the page at / beside
// its probes, and the other services serve no page.
func TestServeWebServesThePage(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	log := slog.New(slog.DiscardHandler)
	ctx := natstest.Context(t, time.Minute)
	for name, wantPage := range map[string]bool{"web": true, "rent": false} {
		ends, stop, err := stack.StartEndpoints(ctx, stack.AloneConfig{Name: name, NC: js.Conn(), JS: js, Addr: "127.0.0.1:0", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		addr := ends.Addr()
		// As `e31 serve web` does once its (pageless) service runs. RENT
		// is not run here: its /readyz would wait for it, and what this
		// test asks of it is only that it serves no page.
		if name == "web" {
			ends.Serving(stack.PageOnly{})
		}
		deadline := time.Now().Add(30 * time.Second)
		for name == "web" {
			code, body := httpGet(t, "http://"+addr+"/readyz")
			if code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve %s: /readyz %d %s", name, code, body)
			}
			time.Sleep(10 * time.Millisecond)
		}
		code, body := httpGet(t, "http://"+addr+"/")
		if got := code == http.StatusOK && strings.Contains(string(body), `id="jobs"`); got != wantPage {
			t.Errorf("serve %s: GET / %d, page served %v, want %v\n%s", name, code, got, wantPage, body)
		}
	}
}
