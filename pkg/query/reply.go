package query

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/cenkalti/backoff/v5"
	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/retry"
)

// roleOf is the role of the identities that ask as user: the auditor and
// the operator ask under their role's name (auth.Identity.Principal), any
// other user is a submitter asking under its own name.
func roleOf(user string) auth.Role {
	switch user {
	case auth.AuditorName:
		return auth.Auditor
	case events.Operator:
		return auth.Operator
	}
	return auth.Submitter
}

// ReplyAllowed reports whether a request asked as user (the user token of
// its subject) may be answered on reply: only under the inbox prefix of an
// identity that asks as user, which only that identity may subscribe to.
// For a submitter that is its own prefix; the auditor and the operator ask
// as their role, so the prefix of any identity of that role will do.
//
// A submitter's request may also carry a reply of the server's own, _R_.…:
// submitters live in the TENANTS account and ask through its service
// import of e31.api.*.> (pkg/auth), so the server replaces whatever reply
// they named with a one-time _R_ subject, and takes the answer back to the
// named reply inside TENANTS, where no stream, bucket or service listens
// and each submitter subscribes only to its own inbox. No client can send
// an _R_ reply itself (the server refuses it as reserved), so one on
// e31.api.<user>.… comes through the import; and through TENANTS only
// submitter user may publish there. The auditor and the operator live in
// E31 with the services and never come through an import.
func ReplyAllowed(user, reply string) bool {
	prefix, rest, ok := strings.Cut(reply, ".")
	if !ok || !literal(rest) {
		return false
	}
	id := auth.Identity{Role: roleOf(user), Name: user}
	if id.Role == auth.Submitter && prefix+"." == ImportReplyPrefix {
		return id.Validate() == nil
	}
	if id.Role != auth.Submitter {
		// The name is that of whichever auditor (or operator) asks: the
		// one the prefix names, as long as it is a valid one.
		name, ok := strings.CutPrefix(prefix, auth.Identity{Role: id.Role}.InboxPrefix())
		if !ok {
			return false
		}
		id.Name = name
	}
	return id.Validate() == nil && id.InboxPrefix() == prefix
}

// ImportReplyPrefix begins the replies the server makes for a request that
// came through a service import (nats-server's reserved "_R_." prefix).
const ImportReplyPrefix = "_R_."

// literal reports whether s is a subject without wildcards or empty
// tokens: something one can publish on.
func literal(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}

// LocalName names the identity behind InboxPrefix for the auditor and the
// operator: a client without e31 credentials has no name of its own.
const LocalName = "local"

// InboxPrefix is the inbox prefix (nats.CustomInboxPrefix) a client that
// asks as user replies on when it holds no e31 credentials, which would
// name one (a server without authentication, and tests): a submitter's
// own, or for the auditor and the operator that of their role's identity
// named LocalName. A client with e31 credentials uses its identity's.
func InboxPrefix(user string) string {
	id := auth.Identity{Role: roleOf(user), Name: user}
	if id.Role != auth.Submitter {
		id.Name = LocalName
	}
	return id.InboxPrefix()
}

// Ask sends a request on subject and returns its reply, on the inbox
// prefix of the user the subject names (InboxPrefix), whatever inbox
// prefix nc has: how a connection without e31 credentials (tests, bench,
// a server without authentication) asks as any user. The server must let
// nc subscribe there. Like nc.Request, it fails with nats.ErrNoResponders
// at once when nothing serves subject.
func Ask(ctx context.Context, nc *nats.Conn, subject string, data []byte) (*nats.Msg, error) {
	inbox := InboxPrefix(wire.UserOf(subject)) + "." + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, fmt.Errorf("ask %s: %w", subject, err)
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", subject, err)
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, fmt.Errorf("ask %s: %w", subject, nats.ErrNoResponders)
	}
	return m, nil
}

// RequestWhileBusy sends a request on subject with nc and returns its
// answer, asking again, with retry.Busy's backoff, while the service
// answers busy (at one of its limits, or a ledger starting again from
// another instance's checkpoint), until ctx ends. A request that fails
// ends it at once with that error. busy is the service's words in the
// last busy answer, if there was one: when err is ctx's, the service was
// still busy when the asker stopped waiting. An answer that is an error
// of another kind is returned as any answer, for the caller to read.
func RequestWhileBusy(ctx context.Context, nc *nats.Conn, subject string, data []byte) (m *nats.Msg, busy string, err error) {
	m, err = backoff.Retry(ctx, func() (*nats.Msg, error) {
		m, err := nc.RequestWithContext(ctx, subject, data)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		var head struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		// Most answers are not busy: a page of records is up to a MiB,
		// which need not be read twice to tell.
		if bytes.Contains(m.Data, busyCode) && gojson.Unmarshal(m.Data, &head) == nil && head.Code == wire.CodeBusy {
			busy = head.Error
			return nil, fmt.Errorf("%w: %s", ErrBusy, head.Error)
		}
		return m, nil
	}, backoff.WithBackOff(retry.Busy.BackOff()), backoff.WithMaxElapsedTime(0))
	return m, busy, err
}

// busyCode is in every busy answer (wire.CodeBusy, as encoded).
var busyCode = []byte(`"code":"` + wire.CodeBusy + `"`)
