package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ServerConfig is the part of a nats-server configuration that makes a
// server trust e31's operator: include it from each server's config
// (`include ./e31-auth.conf`). It uses the server's own account resolver
// ("full": JWTs kept in resolverDir and shared across a cluster), preloaded
// with the E31, TENANTS, NODES and system accounts, so that a pushed account update (Push,
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
		switch key {
		case t.SystemAccount:
			name = "SYS"
		case k.TenantsAccountKey():
			name = TenantsAccountName
		case k.NodesAccountKey():
			name = NodesAccountName
		}
		fmt.Fprintf(&b, "  # %s\n  %s: %q\n", name, key, t.Accounts[key])
	}
	fmt.Fprintf(&b, "}\n")
	return b.String(), nil
}

// Push gives the servers reachable at url the JWTs of e31's accounts
// as they are signed now (with the revocations of Keys.Revoke), as the
// system account, and waits for a server to take each. Servers of a
// cluster pass them on to each other.
func Push(ctx context.Context, url string, k *Keys, opts ...nats.Option) error {
	accounts, err := k.WriteAccountJWTs()
	if err != nil {
		return err
	}
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
	for _, key := range k.AccountOrder() {
		if err := pushAccount(ctx, nc, key, accounts[key]); err != nil {
			return fmt.Errorf("auth: push to %s: %w", url, err)
		}
	}
	return nil
}

// pushAccount sends one account's JWT to the servers nc is connected to.
func pushAccount(ctx context.Context, nc *nats.Conn, key, accountJWT string) error {
	subject := "$SYS.REQ.ACCOUNT." + key + ".CLAIMS.UPDATE"
	m, err := nc.RequestWithContext(ctx, subject, []byte(accountJWT))
	if err != nil {
		return fmt.Errorf("account %s: %w", key, err)
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
		return fmt.Errorf("account %s: bad reply %q: %w", key, m.Data, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("account %s: %s (%d)", key, reply.Error.Description, reply.Error.Code)
	}
	return nil
}

// ServerConfFile is the nats-server configuration WriteServerFiles writes.
const ServerConfFile = "e31-auth.conf"

// WriteServerFiles signs the operator's and the system account's JWTs and
// the server configuration (ServerConfig, with the servers' account JWTs
// kept in resolverDir) and writes them into the keys directory dir, 0600:
// operator.jwt, system.jwt and ServerConfFile. Writing them again re-signs
// them.
func (k *Keys) WriteServerFiles(dir, resolverDir string) error {
	op, err := k.OperatorJWT()
	if err != nil {
		return err
	}
	sys, err := k.SystemJWT()
	if err != nil {
		return err
	}
	conf, err := k.ServerConfig(resolverDir)
	if err != nil {
		return err
	}
	for name, content := range map[string]string{"operator.jwt": op, "system.jwt": sys, ServerConfFile: conf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.TrimSpace(content)+"\n"), 0o600); err != nil {
			return fmt.Errorf("auth: write %s: %w", name, err)
		}
	}
	return nil
}
