package web

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

//go:embed assets
var assets embed.FS

// views are the page's views, each a template of its own over the layout.
var views = []string{"jobs", "job", "pool", "ledger", "audit", "login"}

// fragmentHeader asks for a view's content without the layout: what the
// page's script fetches when the log moves.
const fragmentHeader = "X-E31-Fragment"

// csp lets the page load its own script and style and nothing else: no
// inline script, so that text from the log can never run as one.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func parseViews() (map[string]*template.Template, error) {
	funcs := template.FuncMap{"clock": clock, "bytes": bytesText}
	out := map[string]*template.Template{}
	for _, v := range views {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/"+v+".html")
		if err != nil {
			return nil, fmt.Errorf("web: template %s: %w", v, err)
		}
		out[v] = t
	}
	return out, nil
}

// Handler serves the page: / (the jobs), /job/ID, /pool, /ledger, /audit,
// /live (server-sent events: "changed" whenever the log moves), /login and
// /logout, and its script and style under /assets/.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", http.FileServerFS(assets))
	// Browsers ask for /favicon.ico on every page they show, the plain
	// text of an error too: a 404 there is an error in the console.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		http.ServeFileFS(w, r, assets, "assets/favicon.svg")
	})
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		p.render(w, r, http.StatusOK, "login", viewer{}, loginData{})
	})
	mux.HandleFunc("POST /login", p.login)
	mux.HandleFunc("POST /logout", p.logout)
	mux.HandleFunc("GET /{$}", p.guard(p.jobs))
	mux.HandleFunc("GET /job/{id}", p.guard(p.job))
	mux.HandleFunc("GET /pool", p.guard(p.pool))
	mux.HandleFunc("GET /ledger", p.guard(p.ledger))
	mux.HandleFunc("GET /audit", p.guard(p.auditView))
	mux.HandleFunc("POST /audit", p.guard(p.startAudit))
	mux.HandleFunc("GET /live", p.guard(p.live))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		// same-origin, not no-referrer: with no-referrer a browser sends
		// "Origin: null" on the page's own forms, which sameOrigin refuses.
		w.Header().Set("Referrer-Policy", "same-origin")
		mux.ServeHTTP(w, r)
	})
}

// guard lets through only a viewer the page knows; others are sent to log
// in (a browser) or told 401 (a program with a wrong token).
func (p *Page) guard(h func(http.ResponseWriter, *http.Request, viewer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, ok := p.viewerOf(r)
		switch {
		case ok:
			// The version before anything is read: whatever moves while
			// the view is rendered (asking the ledger can take seconds)
			// comes after it, and the page's script hears of it.
			_, ver := p.watch()
			h(w, r.WithContext(context.WithValue(r.Context(), versionKey{}, ver)), v)
		case !p.closed():
			http.Error(w, "forbidden: this page answers only to a loopback host name (localhost, 127.0.0.1, [::1])", http.StatusForbidden)
		case r.Header.Get("Authorization") != "" || r.Method != http.MethodGet || r.URL.Path == "/live":
			w.Header().Set("WWW-Authenticate", `Bearer realm="e31"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		default:
			http.Redirect(w, r, "/login", http.StatusSeeOther)
		}
	}
}

// versionKey is the context key of the view's version when a request
// began.
type versionKey struct{}

// layout is what every view's frame shows.
type layout struct {
	Title  string
	View   string
	Viewer viewer
	Closed bool
	// Stale says why the page stands still, when it cannot read the log.
	Stale   string
	Applied uint64
	// Version is the view's, as rendered: the page's script follows the
	// log from there.
	Version uint64
	Data    any
}

// render writes view with data, in the layout, or only its content when the
// page's script asks for it.
func (p *Page) render(w http.ResponseWriter, r *http.Request, code int, view string, v viewer, data any) {
	p.mu.Lock()
	ver, ok := r.Context().Value(versionKey{}).(uint64)
	if !ok {
		ver = p.version
	}
	l := layout{Title: view, View: view, Viewer: v, Closed: p.closed(), Applied: p.v.applied, Version: ver, Data: data}
	if p.err != nil {
		l.Stale = p.err.Error()
	}
	p.mu.Unlock()
	name := "layout.html"
	if r.Header.Get(fragmentHeader) != "" {
		name = "content"
	}
	var buf bytes.Buffer
	if err := p.views[view].ExecuteTemplate(&buf, name, l); err != nil {
		p.log.Error("render", "view", view, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// maxRows is the most rows the jobs' list shows: the newest.
const maxRows = 200

// jobRow is one job in the list.
type jobRow struct {
	ID, Name, Submitter, Status, Node string
	Submitted, Updated                time.Time
	Sweep                             int
}

// sweepRow is a sweep in the list: one row that opens on its jobs.
type sweepRow struct {
	ID, Submitter string
	Jobs          []jobRow
	// Statuses counts its jobs by status, as "3 succeeded, 1 running".
	Statuses string
	Over     bool
}

// listRow is one row of the list: a job or a sweep.
type listRow struct {
	Job   *jobRow
	Sweep *sweepRow
}

// jobsData is the jobs' view.
type jobsData struct {
	State, Submitter string
	States           []string
	Submitters       []string
	Rows             []listRow
	Matching         int
	// Cut says the list shows only the newest maxRows rows.
	Cut              bool
	Counts           []count
	Queue, Done, Use template.HTML
}

type count struct {
	Status string
	N      int
}

// filterStates are the statuses the list can be narrowed to.
var filterStates = []string{hold.StateSubmitted, hold.StateWaiting, hold.StateHeld, hold.StateRunning, hold.StateStopped, hold.StateReturned,
	string(events.Succeeded), string(events.Failed), string(events.LimitExceeded), string(events.OutOfMemory), string(events.DiskExceeded),
	string(events.Cancelled), string(events.Rejected), string(events.NodeLost)}

func (p *Page) jobs(w http.ResponseWriter, r *http.Request, v viewer) {
	d := jobsData{State: r.URL.Query().Get("state"), Submitter: r.URL.Query().Get("submitter"), States: filterStates}
	now := p.now()
	counts := map[string]int{}
	subs := map[string]bool{}
	sweeps := map[string]*sweepRow{}
	p.mu.Lock()
	for i := len(p.v.order) - 1; i >= 0; i-- {
		j := p.v.order[i]
		if !v.sees(j.Submitter) {
			continue
		}
		subs[j.Submitter] = true
		st := j.Status()
		counts[st]++
		if (d.State != "" && st != d.State) || (d.Submitter != "" && j.Submitter != d.Submitter) {
			continue
		}
		d.Matching++
		row := jobRow{ID: j.ID, Name: j.Name, Submitter: j.Submitter, Status: st, Node: j.Node, Submitted: j.Submitted, Updated: j.Updated}
		if j.Sweep != nil && j.Sweep.ID != "" {
			row.Sweep = j.Sweep.Index
			s := sweeps[j.Sweep.ID]
			if s == nil {
				if len(d.Rows) >= maxRows {
					continue
				}
				s = &sweepRow{ID: j.Sweep.ID, Submitter: j.Submitter}
				sweeps[s.ID] = s
				d.Rows = append(d.Rows, listRow{Sweep: s})
			}
			s.Jobs = append(s.Jobs, row)
			continue
		}
		if len(d.Rows) < maxRows {
			d.Rows = append(d.Rows, listRow{Job: &row})
		}
	}
	minutes := slices.Clone(p.v.minutes)
	p.mu.Unlock()
	for _, s := range sweeps {
		slices.SortFunc(s.Jobs, func(a, b jobRow) int { return a.Sweep - b.Sweep })
		by := map[string]int{}
		s.Over = true
		for _, j := range s.Jobs {
			by[j.Status]++
			if !isOver(j.Status) {
				s.Over = false
			}
		}
		var parts []string
		for _, st := range filterStates {
			if by[st] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", by[st], st))
			}
		}
		s.Statuses = strings.Join(parts, ", ")
	}
	for _, st := range filterStates {
		if counts[st] > 0 {
			d.Counts = append(d.Counts, count{st, counts[st]})
		}
	}
	d.Cut = len(d.Rows) >= maxRows
	d.Submitters = sortedKeys(subs)
	if v.All() {
		series := hour(minutes, now)
		d.Queue = chart("Jobs waiting, last hour", series, func(m minute) float64 { return float64(m.Waiting) }, "jobs", 0)
		d.Done = chart("Jobs finished per minute, last hour", series, func(m minute) float64 { return float64(m.Finished) }, "jobs/min", 0)
		d.Use = poolChart(series)
	}
	p.render(w, r, http.StatusOK, "jobs", v, d)
}

// poolChart draws the most cores held in each minute against what the pool
// offers now.
func poolChart(series []minute) template.HTML {
	offered := 0.0
	if len(series) > 0 {
		offered = series[len(series)-1].CPU
	}
	return chart("Pool: cores held (most per minute), last hour", series, func(m minute) float64 { return m.CPUHeld }, "cores", offered)
}

// isOver reports whether a status is one a job ends in.
func isOver(status string) bool {
	switch status {
	case hold.StateSubmitted, hold.StateWaiting, hold.StateHeld, hold.StateRunning, hold.StateStopped, hold.StateReturned:
		return false
	}
	return true
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// jobData is a job's view.
type jobData struct {
	ID      string
	Found   bool
	Job     job
	Record  *hold.HoldRecord
	RecErr  string
	Why     *wire.WhyReply
	WhyErr  string
	Logs    *logTail
	Over    bool
	Running bool
	// TraceLink is the job's trace in the tracing UI, if there is one.
	TraceLink string
}

func (p *Page) job(w http.ResponseWriter, r *http.Request, v viewer) {
	id := r.PathValue("id")
	if !events.ValidID(id) {
		http.NotFound(w, r)
		return
	}
	ctx := r.Context()
	d := jobData{ID: id}
	p.mu.Lock()
	_, known := p.v.jobs[id]
	p.mu.Unlock()
	// A job submitted an instant ago (its page opened from what submit
	// printed) may be in the log and not yet in the view: the view reads
	// up to the log's end before the page says there is no such job.
	// What it reads is what Run would have read next.
	if !known {
		if err := p.readNew(ctx); err != nil {
			p.log.Debug("reading the log for a job's page", "job", id, "err", err)
		}
	}
	p.mu.Lock()
	if j := p.v.jobs[id]; j != nil && v.sees(j.Submitter) {
		d.Found, d.Job = true, *j
		d.Job.Timeline = slices.Clone(j.Timeline)
	}
	seq := p.v.applied
	p.mu.Unlock()
	rec, err := p.record(ctx, id, seq)
	switch {
	case err != nil:
		d.RecErr = err.Error()
	case !v.sees(rec.Submitter):
		// Nobody is told whether another's job exists.
		d.Found = false
	default:
		d.Record = rec
	}
	if !d.Found && d.Record == nil {
		p.render(w, r, http.StatusNotFound, "job", v, d)
		return
	}
	if d.Job.Trace != "" && p.cfg.TraceURL != "" {
		d.TraceLink = strings.ReplaceAll(p.cfg.TraceURL, "{trace}", d.Job.Trace)
	}
	status := d.Job.State
	if !d.Found {
		status = d.Record.State
	}
	d.Over = isOver(status) || status == hold.StateReleased
	d.Running = status == hold.StateRunning
	if status == hold.StateWaiting || status == hold.StateSubmitted {
		why, err := p.why(ctx, id)
		if err != nil {
			d.WhyErr = err.Error()
		} else {
			d.Why = &why
		}
	}
	if d.Record != nil && d.Record.Logs != nil {
		d.Logs = p.logsTail(ctx, d.Record)
	}
	p.render(w, r, http.StatusOK, "job", v, d)
}

// poolData is the pool's view.
type poolData struct {
	Allowed  bool
	Nodes    []nodeRow
	Leader   string
	LeaseTTL time.Duration
	LeaseErr string
	Use      template.HTML
	Bars     template.HTML
}

// nodeRow is one node of the pool.
type nodeRow struct {
	Name, State, Isolation string
	CPU, CPUHeld           float64
	Mem, MemHeld           int64
	GPU, GPUHeld           int
	Boot, Renewed          string
	// Withdrawn are the GPUs the node withdrew, with why, by UUID.
	Withdrawn []string
}

func (p *Page) pool(w http.ResponseWriter, r *http.Request, v viewer) {
	d := poolData{Allowed: v.Operator()}
	if !d.Allowed {
		p.render(w, r, http.StatusForbidden, "pool", v, d)
		return
	}
	p.mu.Lock()
	f := p.v.fig.Figures()
	minutes := slices.Clone(p.v.minutes)
	p.mu.Unlock()
	leases, leader, ttl, err := p.leases(r.Context())
	if err != nil {
		d.LeaseErr = err.Error()
	}
	d.Leader, d.LeaseTTL = leader, ttl
	now := p.now()
	for name, n := range f.Nodes {
		if !n.Announced {
			continue
		}
		row := nodeRow{Name: name, State: "up", Isolation: n.Isolation, CPU: n.Capacity.CPU, CPUHeld: n.Held.CPU,
			Mem: n.Capacity.MemoryBytes, MemHeld: n.Held.MemoryBytes, GPU: n.Capacity.GPU, GPUHeld: n.Held.GPU}
		if !n.Up {
			row.State = "lost"
		}
		for _, u := range slices.Sorted(maps.Keys(n.Withdrawn)) {
			row.Withdrawn = append(row.Withdrawn, u+" withdrawn: "+n.Withdrawn[u])
		}
		if l, ok := leases[name]; ok {
			row.Boot, row.Renewed = l.Boot, ago(now, l.Renewed)
		}
		d.Nodes = append(d.Nodes, row)
	}
	slices.SortFunc(d.Nodes, func(a, b nodeRow) int { return strings.Compare(a.Name, b.Name) })
	d.Use = poolChart(hour(minutes, now))
	d.Bars = nodeBars(d.Nodes)
	p.render(w, r, http.StatusOK, "pool", v, d)
}

// ledgerData is the ledger's view: the bill of each submitter for a period.
type ledgerData struct {
	Period       string
	Periods      []string
	Since, Until time.Time
	Totals       []wire.Totals
	Err          string
	// Ask says the ledger was asked (the period was understood).
	Ask bool
}

// day reads one end of a period: a date (its midnight, UTC) or an RFC 3339
// time; "" is no end.
func day(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}

// periods are the spans the ledger's view offers, newest last.
var periods = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour, "all": 0}

func (p *Page) ledger(w http.ResponseWriter, r *http.Request, v viewer) {
	q := r.URL.Query()
	d := ledgerData{Period: q.Get("period"), Periods: []string{"1h", "24h", "7d", "30d", "all"}}
	since, serr := day(q.Get("since"))
	until, uerr := day(q.Get("until"))
	switch span, ok := periods[d.Period]; {
	case serr != nil || uerr != nil:
		d.Err = "a period's ends are dates (2026-12-31) or times (RFC 3339)"
	case !since.IsZero() || !until.IsZero():
		d.Period, d.Since, d.Until = "", since, until
	case ok:
		if span > 0 {
			d.Since = p.now().Add(-span).Truncate(time.Second)
		}
	default:
		d.Period = "24h"
		d.Since = p.now().Add(-periods["24h"]).Truncate(time.Second)
	}
	if d.Err != "" {
		p.render(w, r, http.StatusBadRequest, "ledger", v, d)
		return
	}
	sub := ""
	if !v.All() {
		sub = v.Name
	}
	reply, err := p.totals(r.Context(), d.Since, d.Until, sub)
	d.Ask = true
	if err != nil {
		d.Err = err.Error()
	}
	for _, t := range reply.Submitters {
		if v.sees(t.Submitter) {
			d.Totals = append(d.Totals, t)
		}
	}
	p.render(w, r, http.StatusOK, "ledger", v, d)
}

// auditData is the audit's view.
type auditData struct {
	Allowed bool
	Info    *wire.LedgerInfo
	InfoErr string
	Last    *auditResult
	Running bool
}

func (p *Page) auditView(w http.ResponseWriter, r *http.Request, v viewer) {
	d := auditData{Allowed: v.Operator()}
	if !d.Allowed {
		p.render(w, r, http.StatusForbidden, "audit", v, d)
		return
	}
	info, err := p.head(r.Context())
	if err != nil {
		d.InfoErr = err.Error()
	} else {
		d.Info = &info
	}
	p.auditMu.Lock()
	d.Last, d.Running = p.audit, p.auditOn
	p.auditMu.Unlock()
	p.render(w, r, http.StatusOK, "audit", v, d)
}

// startAudit runs the audit in the background, one at a time: replaying
// the whole log takes a while, and the view shows the result when it is
// there.
func (p *Page) startAudit(w http.ResponseWriter, r *http.Request, v viewer) {
	if !v.Operator() || !sameOrigin(r) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	p.auditMu.Lock()
	start := !p.auditOn
	p.auditOn = true
	p.auditMu.Unlock()
	if start {
		p.log.Info("audit asked from the page", "by", v.Name)
		go p.runAudit(p.runCtx(), v.Name)
		p.notify()
	}
	http.Redirect(w, r, "/audit", http.StatusSeeOther)
}

// keepAlive is how often a live connection hears from the page when the log
// does not move: a comment keeps proxies from closing it, and the charts'
// last hour moves on.
const keepAlive = 20 * time.Second

// coalesce is the least time between two "changed" of one connection: a
// busy log would otherwise have every browser fetch the page for every
// event.
const coalesce = 300 * time.Millisecond

// live streams "changed" to a browser whenever the view has moved past the
// version it last rendered (?since=, which the layout writes into the
// page): a change between the page's rendering and this connection is not
// missed.
func (p *Page) live(w http.ResponseWriter, r *http.Request, _ viewer) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	sent, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		ch, version := p.watch()
		if version == sent {
			select {
			case <-r.Context().Done():
				return
			case <-p.stopped:
				return
			case <-ch:
				continue
			case <-tick.C:
			}
		}
		sent = version
		if _, err := fmt.Fprint(w, "event: changed\ndata: \n\n"); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-p.stopped:
			return
		case <-time.After(coalesce):
		}
	}
}
