package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ServerConfig is the part of a nats-server configuration that makes a
// server trust e31's operator: include it from each server's config
// (`include ./e31-auth.conf`). It uses the server's own account resolver
// ("full": JWTs kept in resolverDir and shared across a cluster), preloaded
// with the E31 and system accounts, so that a pushed account update (Push,
// after Revoke) reaches every server without a restart.
func (k *Keys) ServerConfig(resolverDir string) (string, error) {
	t, err := k.Trust()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# e31: NATS decentralized authentication (written by `e31 creds init`).\n")
	fmt.Fprintf(&b, "# The operator every server trusts; accounts signed by its signing key.\n")
	fmt.Fprintf(&b, "operator: %q\n", t.OperatorJWT)
	fmt.Fprintf(&b, "system_account: %s\n", t.SystemAccount)
	fmt.Fprintf(&b, "# Account JWTs kept on each server and synchronized across the cluster;\n")
	fmt.Fprintf(&b, "# updates (revocations) are pushed with `e31 creds push`.\n")
	fmt.Fprintf(&b, "resolver: {\n  type: full\n  dir: %q\n  allow_delete: false\n  interval: \"2m\"\n}\n", resolverDir)
	fmt.Fprintf(&b, "resolver_preload: {\n")
	keys := make([]string, 0, len(t.Accounts))
	for key := range t.Accounts {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		name := AccountName
		if key == t.SystemAccount {
			name = "SYS"
		}
		fmt.Fprintf(&b, "  # %s\n  %s: %q\n", name, key, t.Accounts[key])
	}
	fmt.Fprintf(&b, "}\n")
	return b.String(), nil
}

// Push gives the servers reachable at url a new account JWT (the output of
// Keys.Revoke or Keys.AccountJWT), as the system account, and waits for one
// to take it. Servers of a cluster pass it on to each other.
func Push(ctx context.Context, url string, k *Keys, accountJWT string, opts ...nats.Option) error {
	creds, err := k.IssueSystem()
	if err != nil {
		return err
	}
	copts, err := creds.Options()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url, append(append(copts, nats.Name("e31-creds-push"), nats.Timeout(5*time.Second)), opts...)...)
	if err != nil {
		return fmt.Errorf("auth: push to %s: %w", url, err)
	}
	defer nc.Close()
	subject := "$SYS.REQ.ACCOUNT." + k.AccountKey() + ".CLAIMS.UPDATE"
	m, err := nc.RequestWithContext(ctx, subject, []byte(accountJWT))
	if err != nil {
		return fmt.Errorf("auth: push to %s: %w", url, err)
	}
	var reply struct {
		Data *struct {
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return fmt.Errorf("auth: push to %s: bad reply %q: %w", url, m.Data, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("auth: push to %s: %s (%d)", url, reply.Error.Description, reply.Error.Code)
	}
	return nil
}
