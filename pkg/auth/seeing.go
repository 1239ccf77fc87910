package auth

import "github.com/e31net/e31/pkg/events"

// AuditorName is the user every auditor asks as (see Identity.Principal): auditors read everything and
// change nothing, so they need not be told apart here.
const AuditorName = "auditor"

// SeesAll reports whether the query services answer user about every job,
// not only its own: the auditor and the operator.
func SeesAll(user string) bool { return user == AuditorName || user == events.Operator }
