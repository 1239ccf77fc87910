// Package web is the operator's page: what e31 is doing, in a browser,
// without a reload. `e31 dev` serves it at / beside /metrics, and `e31
// serve web` serves it alone.
//
// # What it shows
//
//   - The jobs, newest first, filtered by state and submitter; a sweep is
//     one row that opens on its jobs. Charts of the last hour: jobs waiting,
//     jobs finished per minute, cores held against the pool's.
//   - A job: its timeline (every event with its ce-time and stream
//     sequence), why it waits (the scheduler's answer), its hold record and
//     meter (the ledger's), the last lines of its logs (the submitter's
//     store) and the trace id its events carry in `traceparent`.
//   - The pool: each node's capacity against what is held on it, its
//     isolation, its lease (boot and last renewal), the scheduler's leader.
//   - The ledger's totals per submitter for a period.
//   - The audit: the ledger's chain head, and the last audit run from the
//     page (pkg/audit, as `e31 audit`).
//
// # Where it gets them
//
// Page.Run follows the log itself, as pkg/metrics does, and folds it into a
// view (the jobs and their events, the pool through metrics.Projection, a
// per-minute history for the charts): the list and the timeline need every
// event's time, which no query endpoint gives in one go. It reads stored
// messages with direct gets (bus.Stored), woken by a core subscription to
// the log's subjects, not with a consumer: a tenant can store a message
// that a consumer takes for a status of its own and stalls on (see
// bus.Replay). What the services know better is asked of them through the
// query endpoints (pkg/query/wire): the hold record, the totals and the chain head
// of the ledger, the scheduler's why. Memory is bounded: past keepOver jobs
// that are over, the oldest are forgotten (their page then shows the
// ledger's record without the event times).
//
// # Live
//
// The page is rendered on the server (html/template). A short script opens
// /live, a stream of server-sent events that says "changed" whenever the
// view moves (at most every 300 ms per browser), and fetches the same URL
// again with the X-E31-Fragment header, which renders the view without its
// frame, to put in place. The stream tells each browser of every version
// after the one it rendered, so no change slips between the rendering and
// the stream. No script is inline and the Content-Security-Policy allows
// none: text from the log is only ever text.
//
// # Who sees what
//
// The page reads as the operator and shows each viewer its part. With no
// token (Config.Token, Config.Viewers) it is open, and pkg/ops serves it on
// loopback only; it then also answers only requests whose Host is a
// loopback name, so that a web site cannot reach it through DNS rebinding.
// With tokens, a viewer logs in with one (a form that sets an HttpOnly,
// SameSite=Strict cookie, or an Authorization: Bearer header): the
// operator's token (the one /metrics asks for) and the "operator" and
// "auditor" viewers see everything; a submitter's token shows that
// submitter's jobs and totals only, and neither the pool nor the audit. A
// job of another submitter is "not found", as one that does not exist.
// Requests that change something (log in, log out, run the audit) must come
// from the page's own origin. See SECURITY.md.
package web
