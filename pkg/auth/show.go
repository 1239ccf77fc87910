package auth

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText says, for people, who c is and what it may publish and
// subscribe to (`e31 creds show`): its identity, or that e31 did not make
// it, its expiry and its permissions. It writes nothing for credentials it
// cannot read.
func (c Creds) WriteText(w io.Writer) error {
	uc, err := c.Claims()
	if err != nil {
		return err
	}
	id, err := c.Identity()
	var b strings.Builder
	switch {
	case errors.Is(err, ErrNotE31):
		fmt.Fprintf(&b, "user %s %q: not made by e31\n", uc.Subject, uc.Name)
	case err != nil:
		return err
	default:
		fmt.Fprintf(&b, "%s (user %s, inbox %s.>)\n", id, uc.Subject, id.InboxPrefix())
	}
	if uc.Expires > 0 {
		fmt.Fprintf(&b, "expires %s\n", time.Unix(uc.Expires, 0).UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "publish:   %s\n", strings.Join(uc.Pub.Allow, " "))
	if len(uc.Pub.Deny) > 0 {
		// What a wildcard above would allow but is refused all the same.
		fmt.Fprintf(&b, "but not:   %s\n", strings.Join(uc.Pub.Deny, " "))
	}
	fmt.Fprintf(&b, "subscribe: %s\n", strings.Join(uc.Sub.Allow, " "))
	if uc.Resp != nil {
		fmt.Fprintf(&b, "responds:  once to each request, within %s\n", uc.Resp.Expires)
	}
	_, err = io.WriteString(w, b.String())
	return err
}
