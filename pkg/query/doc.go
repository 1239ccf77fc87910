// Package query serves e31's query endpoints (the ledger's records and
// events, the scheduler's why, OUTPUT's stored) the same way in every
// service: who asks, where the answer may go, and how much one asker may
// hold at once are decided here, once, and a service's handler only
// answers.
//
// # Who asks, and where the answer goes
//
// A request comes on e31.api.<user>.<service>.<endpoint>. The server lets an
// identity publish only under its own name there (pkg/auth), so the user
// token is who asks. The reply subject, though, is whatever the asker wrote:
// a service that answered it blindly would publish wherever a submitter
// pointed it (a node's lease key, another tenant's object store, an event
// subject of the log, the JetStream API, another identity's inbox), and the
// server's response permissions, which let a service answer each request
// once, would let that one message through. So a Server answers only a
// reply subject under the inbox prefix of the identity the user token names
// (ReplyAllowed: auth.Identity.InboxPrefix, _INBOX_<role>_<name>): a
// submitter's own, or, for "auditor" and "operator", that of any identity
// of that role; and for a submitter, the server's own _R_.… reply, which
// only the service import that submitters ask through (their TENANTS
// account, pkg/auth) can produce, and whose answer the server takes back
// into TENANTS, where nothing stores it. A request with any other reply
// subject, or none, gets no
// answer at all; it is counted (Stats.Refused) and logged at most once per
// WarnEvery. Handlers never see the reply subject: every answer goes out
// through Request, which only exists for a request that passed the check.
//
// Every legitimate asker already replies on such a prefix: connections made
// with e31 credentials use their identity's (pkg/connect, auth.Creds), and a
// client without e31 credentials (a server without authentication, tests)
// uses InboxPrefix of the user it asks as.
//
// # Concurrency and bounds
//
// nats.go's micro calls an endpoint's handler for one request at a time, so
// one tenant's long poll (a record request that waits for its job to end,
// up to 30 s) would delay every other tenant's question by as long. A Server
// runs each admitted request in a goroutine of its own, which Stop waits
// for, and bounds what any one user can take (Limits): requests in flight
// per user and in all, and long polls — requests that wait — per user, each
// waiting at most MaxWait. A request beyond a limit is answered at once
// with {"error": "busy: …, retry", "code": "busy"} (wire.CodeBusy); the CLI
// and the operator's page ask again with backoff until their own deadline
// (RequestWhileBusy). A request counts as a
// long poll from the moment its handler first waits (Request.Await) until
// it is answered, so a question answered at once never takes a long poll.
package query
