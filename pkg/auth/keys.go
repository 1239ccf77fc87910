package auth

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
)

// AccountName is the name of the account e31 runs in: the event log, the
// buckets, the services, the auditor and the operator.
const AccountName = "E31"

// TenantsAccountName is the name of the submitters' account. It has no
// JetStream of its own and reaches e31 only through service imports from
// E31, so that every reply to a submitter's request comes back into it
// (see doc.go, "Accounts").
const TenantsAccountName = "TENANTS"

// NodesAccountName is the name of the run nodes' account: like TENANTS, no
// JetStream of its own, and e31 only through the imports of what E31
// exports to it (see doc.go, "Accounts"). What the nodes' jobs write it
// exports to TENANTS and E31.
const NodesAccountName = "NODES"

// Key files in a keys directory: the seeds, each readable by its owner only.
// Whoever holds account-signing.nk can mint any identity; whoever holds
// operator.nk or operator-signing.nk can mint accounts: keep the directory
// off the servers and off shared disks.
const (
	OperatorKeyFile        = "operator.nk"
	OperatorSigningKeyFile = "operator-signing.nk"
	AccountKeyFile         = "account.nk"
	AccountSigningKeyFile  = "account-signing.nk"
	SystemKeyFile          = "system.nk"
	SystemSigningKeyFile   = "system-signing.nk"
	TenantsKeyFile         = "tenants.nk"
	TenantsSigningKeyFile  = "tenants-signing.nk"
	NodesKeyFile           = "nodes.nk"
	NodesSigningKeyFile    = "nodes-signing.nk"
	// AccountJWTFile keeps the account JWT once written, so that what is
	// only in it (revocations) survives the next signing.
	AccountJWTFile = "account.jwt"
	// TenantsJWTFile does the same for the TENANTS account.
	TenantsJWTFile = "tenants.jwt"
	// NodesJWTFile does the same for the NODES account.
	NodesJWTFile = "nodes.jwt"
)

// keyFiles lists the seeds a keys directory has had from the start: all or
// none of them must be there.
var keyFiles = []string{OperatorKeyFile, OperatorSigningKeyFile, AccountKeyFile, AccountSigningKeyFile, SystemKeyFile, SystemSigningKeyFile}

// ErrKeys is wrapped by errors about a keys directory that cannot be used.
var ErrKeys = errors.New("auth: keys")

// Keys are the operator's, the E31, TENANTS, NODES and system accounts'
// keys.
// The identity keys sign only their own claims; everyday signing is done
// with the signing keys (the operator's signs accounts, each account's signs
// its users), so that a signing key can be replaced without changing who the
// operator or the account is, and the identity keys can stay offline: the
// operator requires it (strict signing key usage).
type Keys struct {
	// Dir is where the keys are kept.
	Dir             string
	Operator        nkeys.KeyPair
	OperatorSigning nkeys.KeyPair
	Account         nkeys.KeyPair
	AccountSigning  nkeys.KeyPair
	System          nkeys.KeyPair
	SystemSigning   nkeys.KeyPair
	Tenants         nkeys.KeyPair
	TenantsSigning  nkeys.KeyPair
	Nodes           nkeys.KeyPair
	NodesSigning    nkeys.KeyPair
	// Cards signs node cards (cards.go): not a NATS key.
	Cards ed25519.PrivateKey
}

// InitKeys loads the keys in dir, or creates them all if dir has none, and
// reports whether it created them. A directory with some keys but not all
// is refused: a new account key would orphan the account's data.
func InitKeys(dir string) (*Keys, bool, error) {
	present := 0
	for _, f := range keyFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			present++
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, fmt.Errorf("%w: %w", ErrKeys, err)
		}
	}
	switch present {
	case len(keyFiles):
		k, err := LoadKeys(dir)
		return k, false, err
	case 0:
	default:
		return nil, false, fmt.Errorf("%w: %s has %d of the %d key files %v: restore the missing ones, or start from an empty directory", ErrKeys, dir, present, len(keyFiles), keyFiles)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrKeys, err)
	}
	k := &Keys{Dir: dir}
	for _, x := range []struct {
		kp   *nkeys.KeyPair
		make func() (nkeys.KeyPair, error)
		file string
	}{
		{&k.Operator, nkeys.CreateOperator, OperatorKeyFile},
		{&k.OperatorSigning, nkeys.CreateOperator, OperatorSigningKeyFile},
		{&k.Account, nkeys.CreateAccount, AccountKeyFile},
		{&k.AccountSigning, nkeys.CreateAccount, AccountSigningKeyFile},
		{&k.System, nkeys.CreateAccount, SystemKeyFile},
		{&k.SystemSigning, nkeys.CreateAccount, SystemSigningKeyFile},
	} {
		kp, err := x.make()
		if err != nil {
			return nil, false, fmt.Errorf("%w: create %s: %w", ErrKeys, x.file, err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, false, fmt.Errorf("%w: create %s: %w", ErrKeys, x.file, err)
		}
		if err := writeSecret(filepath.Join(dir, x.file), append(seed, '\n')); err != nil {
			return nil, false, err
		}
		*x.kp = kp
	}
	if err := k.addLaterKeys(); err != nil {
		return nil, false, err
	}
	if err := k.addCardsKey(); err != nil {
		return nil, false, err
	}
	return k, true, nil
}

// LoadKeys reads the keys in dir, and makes the TENANTS and NODES
// accounts' if dir was made before there were.
func LoadKeys(dir string) (*Keys, error) {
	k := &Keys{Dir: dir}
	for _, x := range []struct {
		kp     *nkeys.KeyPair
		file   string
		prefix nkeys.PrefixByte
	}{
		{&k.Operator, OperatorKeyFile, nkeys.PrefixByteOperator},
		{&k.OperatorSigning, OperatorSigningKeyFile, nkeys.PrefixByteOperator},
		{&k.Account, AccountKeyFile, nkeys.PrefixByteAccount},
		{&k.AccountSigning, AccountSigningKeyFile, nkeys.PrefixByteAccount},
		{&k.System, SystemKeyFile, nkeys.PrefixByteAccount},
		{&k.SystemSigning, SystemSigningKeyFile, nkeys.PrefixByteAccount},
	} {
		p := filepath.Join(dir, x.file)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKeys, err)
		}
		kp, err := nkeys.ParseDecoratedNKey(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrKeys, p, err)
		}
		if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicKey(pub) || nkeys.Prefix(pub) != x.prefix {
			return nil, fmt.Errorf("%w: %s does not hold the kind of key its name says", ErrKeys, p)
		}
		*x.kp = kp
	}
	if err := k.addLaterKeys(); err != nil {
		return nil, err
	}
	if err := k.addCardsKey(); err != nil {
		return nil, err
	}
	return k, nil
}

// addLaterKeys reads the TENANTS and NODES accounts' keys, making
// whichever is missing: they came after the others, and a directory made
// before gains them when it is loaded. Neither account holds data, so new
// keys orphan nothing; they void only credentials signed by keys now gone
// (a node's made before NODES are E31 users, and keep working until
// revoked: see SECURITY.md).
func (k *Keys) addLaterKeys() error {
	for _, x := range []struct {
		kp   *nkeys.KeyPair
		file string
	}{
		{&k.Tenants, TenantsKeyFile},
		{&k.TenantsSigning, TenantsSigningKeyFile},
		{&k.Nodes, NodesKeyFile},
		{&k.NodesSigning, NodesSigningKeyFile},
	} {
		p := filepath.Join(k.Dir, x.file)
		b, err := os.ReadFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			kp, err := nkeys.CreateAccount()
			if err != nil {
				return fmt.Errorf("%w: create %s: %w", ErrKeys, x.file, err)
			}
			seed, err := kp.Seed()
			if err != nil {
				return fmt.Errorf("%w: create %s: %w", ErrKeys, x.file, err)
			}
			if err := writeSecret(p, append(seed, '\n')); err != nil {
				return err
			}
			*x.kp = kp
			continue
		case err != nil:
			return fmt.Errorf("%w: %w", ErrKeys, err)
		}
		kp, err := nkeys.ParseDecoratedNKey(b)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrKeys, p, err)
		}
		if pub, err := kp.PublicKey(); err != nil || nkeys.Prefix(pub) != nkeys.PrefixByteAccount {
			return fmt.Errorf("%w: %s does not hold the kind of key its name says", ErrKeys, p)
		}
		*x.kp = kp
	}
	return nil
}

func pub(kp nkeys.KeyPair) string {
	p, err := kp.PublicKey()
	if err != nil {
		// A key pair made or parsed by nkeys always has a public key.
		panic(fmt.Sprintf("auth: public key: %v", err))
	}
	return p
}

// AccountKey is the E31 account's public key: the name the servers know it
// by (and, in operator mode, the name of its JetStream store directory).
func (k *Keys) AccountKey() string { return pub(k.Account) }

// TenantsAccountKey is the TENANTS account's public key.
func (k *Keys) TenantsAccountKey() string { return pub(k.Tenants) }

// NodesAccountKey is the NODES account's public key.
func (k *Keys) NodesAccountKey() string { return pub(k.Nodes) }

// SystemAccountKey is the system account's public key.
func (k *Keys) SystemAccountKey() string { return pub(k.System) }

// AccountOf is the public key of the account whose users have role:
// TENANTS for submitters, E31 for everyone else but the run nodes (see
// AccountFor).
func (k *Keys) AccountOf(role Role) string {
	if role == Submitter {
		return k.TenantsAccountKey()
	}
	return k.AccountKey()
}

// AccountFor is the public key of the account id is a user of: NODES for
// a run node (service run), else AccountOf its role.
func (k *Keys) AccountFor(id Identity) string {
	if id.IsNode() {
		return k.NodesAccountKey()
	}
	return k.AccountOf(id.Role)
}

// signerFor is the signing key of id's account.
func (k *Keys) signerFor(id Identity) nkeys.KeyPair {
	switch {
	case id.IsNode():
		return k.NodesSigning
	case id.Role == Submitter:
		return k.TenantsSigning
	}
	return k.AccountSigning
}

// OperatorJWT is the operator's self-signed JWT: what servers trust.
func (k *Keys) OperatorJWT() (string, error) {
	oc := jwt.NewOperatorClaims(pub(k.Operator))
	oc.Name = "e31"
	oc.SigningKeys.Add(pub(k.OperatorSigning))
	oc.SystemAccount = pub(k.System)
	// Accounts must be signed with the signing key, never the identity key,
	// which can then stay offline.
	oc.StrictSigningKeyUsage = true
	t, err := oc.Encode(k.Operator)
	if err != nil {
		return "", fmt.Errorf("%w: sign the operator: %w", ErrKeys, err)
	}
	return t, nil
}

// shared is one subject an account exports to another, which imports it
// under the same subject.
type shared struct {
	subject string
	// stream: the answer to one request may be several messages.
	stream bool
	// flow: not a service but a flow of messages the exporter publishes
	// and the importer receives (a stream export, in NATS's words): a
	// request's reply plays no part in it.
	flow bool
}

// tenantServices is everything a submitter may ask of e31: what E31
// exports to TENANTS. A submitter's permissions narrow each to its own
// subjects (Permissions); the imports only carry what those permissions
// let through into E31, and every answer back. They are:
//
//   - its requests, cancels and deletions, stored by the E31 stream: the
//     answer is the PubAck;
//   - its queries, answered by the query services;
//   - the object store subjects of its bucket (chunks and metadata): PubAcks;
//   - the JetStream API (the info of its bucket, reading, purging): an API
//     answer, or for a batched direct get several messages.
//
// What its running jobs write (events.LogSubjects), which nodes publish
// for `e31 logs --follow`, it imports from NODES (nodeFlows).
func tenantServices() []shared {
	var out []shared
	for _, t := range submitted {
		out = append(out, shared{subject: subjectOf(t, "*", "*")})
	}
	return append(out,
		shared{subject: wire.UserSubjects("*")},
		shared{subject: "$O.>"},
		shared{subject: jsAPI + ">", stream: true},
	)
}

// nodeServices is everything a run node may ask of e31: what E31 exports
// to NODES. A node's permissions narrow each to its own (Permissions);
// through the imports every answer comes back into NODES, where nothing
// stores it. They are:
//
//   - its events (RUN's: NodeAnnounced, the device events, RunStarted,
//     RunStopped) and its poison subject, stored by the E31 and poison streams: the answer is the
//     PubAck;
//   - its lease, in the nodes' bucket (events.NodeLeasesBucket): PubAcks;
//   - the JetStream API (reading the log, the info of its consumers and
//     the pulls from them): an API answer, or several messages;
//   - the acks of what it pulled, which go to $JS.ACK.<stream>.<consumer>…;
//   - the node gate (pkg/gate), which may answer with several messages.
func nodeServices() []shared {
	var out []shared
	for _, t := range owned[RunService] {
		out = append(out, shared{subject: subjectOf(t, "*", "*")})
	}
	return append(out,
		shared{subject: events.PoisonSubject(RunService)},
		shared{subject: "$KV." + events.NodeLeasesBucket + ".>"},
		shared{subject: jsAPI + ">", stream: true},
		shared{subject: "$JS.ACK.>"},
		shared{subject: events.GateSubjects("*"), stream: true},
	)
}

// nodeFlows is what NODES exports, to TENANTS and E31: what the nodes'
// running jobs write, for their submitters (and the operator) to follow.
func nodeFlows() []shared {
	return []shared{{subject: events.LogSubjects("*"), flow: true}}
}

// export is s as an export that only an account holding an activation
// token may import.
func (s shared) export() *jwt.Export {
	e := &jwt.Export{Name: s.subject, Subject: jwt.Subject(s.subject), TokenReq: true, Type: jwt.Service,
		ResponseType: jwt.ResponseTypeSingleton}
	if s.stream {
		e.ResponseType = jwt.ResponseTypeStream
	}
	if s.flow {
		e.Type, e.ResponseType = jwt.Stream, ""
	}
	return e
}

// imports adds to ac the imports of what the account from exports,
// each with an activation token signed by signer for ac's account.
func imports(ac *jwt.AccountClaims, from string, signer nkeys.KeyPair, what []shared) error {
	for _, s := range what {
		typ := jwt.Service
		if s.flow {
			typ = jwt.Stream
		}
		act := jwt.NewActivationClaims(ac.Subject)
		act.Name = s.subject
		act.ImportSubject = jwt.Subject(s.subject)
		act.ImportType = typ
		act.IssuerAccount = from
		token, err := act.Encode(signer)
		if err != nil {
			return fmt.Errorf("%w: sign the activation of %s: %w", ErrKeys, s.subject, err)
		}
		ac.Imports.Add(&jwt.Import{Name: s.subject, Subject: jwt.Subject(s.subject), Account: from, Token: token, Type: typ})
	}
	return nil
}

// exported is what E31 exports: what TENANTS and NODES import, each
// subject once.
func exported() []shared {
	var out []shared
	seen := map[string]bool{}
	for _, s := range append(tenantServices(), nodeServices()...) {
		if !seen[s.subject] {
			seen[s.subject] = true
			out = append(out, s)
		}
	}
	return out
}

// AccountJWT signs the E31 account's JWT: JetStream enabled without limits,
// users signed by the account signing key, no permissions at all for a
// user whose JWT carries none, the services TENANTS and NODES import,
// exported to them alone (an activation token signed for each), and what
// the nodes' jobs write, imported from NODES for the operator. Revocations
// already in the account JWT file are kept.
func (k *Keys) AccountJWT() (string, error) {
	prev, err := k.readAccountJWT(AccountJWTFile, pub(k.Account))
	if err != nil {
		return "", err
	}
	return k.signAccount(prev)
}

func (k *Keys) signAccount(revoked jwt.RevocationList) (string, error) {
	ac := jwt.NewAccountClaims(pub(k.Account))
	ac.Revocations = revoked
	ac.Name = AccountName
	ac.SigningKeys.Add(pub(k.AccountSigning))
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit}
	// A user minted by some other tool with no permissions of its own gets
	// none, rather than everything.
	ac.DefaultPermissions.Pub.Deny.Add(">")
	ac.DefaultPermissions.Sub.Deny.Add(">")
	for _, s := range exported() {
		ac.Exports.Add(s.export())
	}
	if err := imports(ac, pub(k.Nodes), k.NodesSigning, nodeFlows()); err != nil {
		return "", err
	}
	t, err := ac.Encode(k.OperatorSigning)
	if err != nil {
		return "", fmt.Errorf("%w: sign the account: %w", ErrKeys, err)
	}
	return t, nil
}

// TenantsJWT signs the TENANTS account's JWT: no JetStream, users signed
// by its own signing key, no permissions for a user whose JWT carries none,
// the imports of tenantServices from E31 and of nodeFlows from NODES.
// Revocations already in the TENANTS JWT file are kept.
func (k *Keys) TenantsJWT() (string, error) {
	prev, err := k.readAccountJWT(TenantsJWTFile, pub(k.Tenants))
	if err != nil {
		return "", err
	}
	return k.signTenants(prev)
}

func (k *Keys) signTenants(revoked jwt.RevocationList) (string, error) {
	ac := jwt.NewAccountClaims(pub(k.Tenants))
	ac.Revocations = revoked
	ac.Name = TenantsAccountName
	ac.SigningKeys.Add(pub(k.TenantsSigning))
	// No JetStream: the account has nothing a reply could be stored in,
	// and its users' JetStream API requests go to E31's, through the
	// import.
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{}
	ac.DefaultPermissions.Pub.Deny.Add(">")
	ac.DefaultPermissions.Sub.Deny.Add(">")
	if err := imports(ac, pub(k.Account), k.AccountSigning, tenantServices()); err != nil {
		return "", err
	}
	if err := imports(ac, pub(k.Nodes), k.NodesSigning, nodeFlows()); err != nil {
		return "", err
	}
	t, err := ac.Encode(k.OperatorSigning)
	if err != nil {
		return "", fmt.Errorf("%w: sign the tenants account: %w", ErrKeys, err)
	}
	return t, nil
}

// NodesJWT signs the NODES account's JWT: no JetStream, users signed by
// its own signing key, no permissions for a user whose JWT carries none,
// the imports of nodeServices from E31, and nodeFlows exported to TENANTS
// and E31. Revocations already in the NODES JWT file are kept.
func (k *Keys) NodesJWT() (string, error) {
	prev, err := k.readAccountJWT(NodesJWTFile, pub(k.Nodes))
	if err != nil {
		return "", err
	}
	return k.signNodes(prev)
}

func (k *Keys) signNodes(revoked jwt.RevocationList) (string, error) {
	ac := jwt.NewAccountClaims(pub(k.Nodes))
	ac.Revocations = revoked
	ac.Name = NodesAccountName
	ac.SigningKeys.Add(pub(k.NodesSigning))
	// No JetStream, for the reason TENANTS has none: whatever reply a
	// node names, JetStream's answer comes back here, where nothing
	// stores it.
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{}
	ac.DefaultPermissions.Pub.Deny.Add(">")
	ac.DefaultPermissions.Sub.Deny.Add(">")
	if err := imports(ac, pub(k.Account), k.AccountSigning, nodeServices()); err != nil {
		return "", err
	}
	for _, s := range nodeFlows() {
		ac.Exports.Add(s.export())
	}
	t, err := ac.Encode(k.OperatorSigning)
	if err != nil {
		return "", fmt.Errorf("%w: sign the nodes account: %w", ErrKeys, err)
	}
	return t, nil
}

// readAccountJWT reads the revocations in an account JWT file of account,
// if there is one.
func (k *Keys) readAccountJWT(file, account string) (jwt.RevocationList, error) {
	b, err := os.ReadFile(filepath.Join(k.Dir, file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeys, err)
	}
	ac, err := jwt.DecodeAccountClaims(string(trimSpace(b)))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeys, file, err)
	}
	if ac.Subject != account {
		return nil, fmt.Errorf("%w: %s is another account's", ErrKeys, file)
	}
	return ac.Revocations, nil
}

// WriteAccountJWT signs the E31 account JWT and writes it to the account
// JWT file, returning it.
func (k *Keys) WriteAccountJWT() (string, error) {
	t, err := k.AccountJWT()
	if err != nil {
		return "", err
	}
	if err := writeSecret(filepath.Join(k.Dir, AccountJWTFile), []byte(t+"\n")); err != nil {
		return "", err
	}
	return t, nil
}

// WriteAccountJWTs signs the JWTs of e31's three accounts, writes each to
// its file, and returns them by account public key: what servers are
// given, preloaded or pushed (in AccountOrder).
func (k *Keys) WriteAccountJWTs() (map[string]string, error) {
	acc, err := k.WriteAccountJWT()
	if err != nil {
		return nil, err
	}
	out := map[string]string{pub(k.Account): acc}
	for _, a := range []struct {
		file, account string
		sign          func() (string, error)
	}{
		{TenantsJWTFile, pub(k.Tenants), k.TenantsJWT},
		{NodesJWTFile, pub(k.Nodes), k.NodesJWT},
	} {
		t, err := a.sign()
		if err != nil {
			return nil, err
		}
		if err := writeSecret(filepath.Join(k.Dir, a.file), []byte(t+"\n")); err != nil {
			return nil, err
		}
		out[a.account] = t
	}
	return out, nil
}

// AccountOrder is the order accounts are given to servers in: E31, the
// exporter of most, first; then NODES, which exports to TENANTS; then
// TENANTS.
func (k *Keys) AccountOrder() []string {
	return []string{pub(k.Account), pub(k.Nodes), pub(k.Tenants)}
}

// Revoke records in every account JWT file that every credential of user
// (its public key, Creds.UserKey) issued until now is void, whichever
// account signed them: a key names no account, and a revocation in the
// others is harmless. Servers learn of it when they are given the JWTs
// (Push).
func (k *Keys) Revoke(userKey string) error {
	if !nkeys.IsValidPublicUserKey(userKey) {
		return fmt.Errorf("%w: %q is not a user's public key", ErrKeys, userKey)
	}
	for _, a := range []struct {
		file, account string
		sign          func(jwt.RevocationList) (string, error)
	}{
		{AccountJWTFile, pub(k.Account), k.signAccount},
		{TenantsJWTFile, pub(k.Tenants), k.signTenants},
		{NodesJWTFile, pub(k.Nodes), k.signNodes},
	} {
		prev, err := k.readAccountJWT(a.file, a.account)
		if err != nil {
			return err
		}
		ac := jwt.NewAccountClaims(a.account)
		ac.Revocations = prev
		ac.RevokeAt(userKey, time.Now())
		t, err := a.sign(ac.Revocations)
		if err != nil {
			return err
		}
		if err := writeSecret(filepath.Join(k.Dir, a.file), []byte(t+"\n")); err != nil {
			return err
		}
	}
	return nil
}

// SystemJWT signs the system account's JWT: the account servers use to talk
// among themselves and to take account updates.
func (k *Keys) SystemJWT() (string, error) {
	ac := jwt.NewAccountClaims(pub(k.System))
	ac.Name = "SYS"
	ac.SigningKeys.Add(pub(k.SystemSigning))
	t, err := ac.Encode(k.OperatorSigning)
	if err != nil {
		return "", fmt.Errorf("%w: sign the system account: %w", ErrKeys, err)
	}
	return t, nil
}

// Trust is what a server needs to run in operator mode: the operator it
// trusts, its system account, and the account JWTs to preload.
type Trust struct {
	OperatorJWT   string
	SystemAccount string
	// Accounts maps each account's public key to its JWT: E31, TENANTS,
	// NODES and the system account.
	Accounts map[string]string
}

// Trust signs everything a server needs.
func (k *Keys) Trust() (Trust, error) {
	op, err := k.OperatorJWT()
	if err != nil {
		return Trust{}, err
	}
	accounts, err := k.WriteAccountJWTs()
	if err != nil {
		return Trust{}, err
	}
	sys, err := k.SystemJWT()
	if err != nil {
		return Trust{}, err
	}
	accounts[pub(k.System)] = sys
	return Trust{OperatorJWT: op, SystemAccount: pub(k.System), Accounts: accounts}, nil
}

// Issue mints credentials for id, valid for expires (0: until revoked),
// with the permissions of its role: a submitter in the TENANTS account and
// a run node in NODES, each signed by its account's signing key; everyone
// else in E31.
func (k *Keys) Issue(id Identity, expires time.Duration) (Creds, error) {
	perms, err := Permissions(id)
	if err != nil {
		return Creds{}, err
	}
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return Creds{}, fmt.Errorf("auth: issue %s: %w", id, err)
	}
	uc := jwt.NewUserClaims(pub(ukp))
	uc.Name = id.Name
	uc.IssuerAccount = k.AccountFor(id)
	uc.Permissions = perms
	uc.Tags.Add(tagRole + string(id.Role))
	if id.Service != "" {
		uc.Tags.Add(tagService + id.Service)
	}
	if expires > 0 {
		uc.Expires = time.Now().Add(expires).Unix()
	}
	t, err := uc.Encode(k.signerFor(id))
	if err != nil {
		return Creds{}, fmt.Errorf("auth: issue %s: %w", id, err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		return Creds{}, fmt.Errorf("auth: issue %s: %w", id, err)
	}
	return Creds{JWT: t, Seed: seed}, nil
}

// IssueSystem mints credentials of the system account, for pushing account
// JWT updates to running servers.
func (k *Keys) IssueSystem() (Creds, error) {
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return Creds{}, fmt.Errorf("auth: issue system user: %w", err)
	}
	uc := jwt.NewUserClaims(pub(ukp))
	uc.Name = "system"
	uc.IssuerAccount = pub(k.System)
	t, err := uc.Encode(k.SystemSigning)
	if err != nil {
		return Creds{}, fmt.Errorf("auth: issue system user: %w", err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		return Creds{}, fmt.Errorf("auth: issue system user: %w", err)
	}
	return Creds{JWT: t, Seed: seed}, nil
}

// writeSecret writes a file only its owner can read, replacing it whole.
func writeSecret(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrKeys, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: %w", ErrKeys, err)
	}
	return nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
