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
// (see doc.go, "Two accounts").
const TenantsAccountName = "TENANTS"

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
	// AccountJWTFile keeps the account JWT once written, so that what is
	// only in it (revocations) survives the next signing.
	AccountJWTFile = "account.jwt"
	// TenantsJWTFile does the same for the TENANTS account.
	TenantsJWTFile = "tenants.jwt"
)

// keyFiles lists the seeds a keys directory has had from the start: all or
// none of them must be there.
var keyFiles = []string{OperatorKeyFile, OperatorSigningKeyFile, AccountKeyFile, AccountSigningKeyFile, SystemKeyFile, SystemSigningKeyFile}

// ErrKeys is wrapped by errors about a keys directory that cannot be used.
var ErrKeys = errors.New("auth: keys")

// Keys are the operator's, the E31, TENANTS and system accounts' keys.
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
	if err := k.addTenantsKeys(); err != nil {
		return nil, false, err
	}
	if err := k.addCardsKey(); err != nil {
		return nil, false, err
	}
	return k, true, nil
}

// LoadKeys reads the keys in dir, and makes the TENANTS account's if dir
// was made before there was one.
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
	if err := k.addTenantsKeys(); err != nil {
		return nil, err
	}
	if err := k.addCardsKey(); err != nil {
		return nil, err
	}
	return k, nil
}

// addTenantsKeys reads the TENANTS account's keys, making whichever is
// missing: they came after the others, and a directory made before gains
// them when it is loaded. The account holds no data, so new keys orphan
// nothing; they void only submitter credentials signed by keys now gone.
func (k *Keys) addTenantsKeys() error {
	for _, x := range []struct {
		kp   *nkeys.KeyPair
		file string
	}{
		{&k.Tenants, TenantsKeyFile},
		{&k.TenantsSigning, TenantsSigningKeyFile},
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

// SystemAccountKey is the system account's public key.
func (k *Keys) SystemAccountKey() string { return pub(k.System) }

// AccountOf is the public key of the account whose users have role:
// TENANTS for submitters, E31 for everyone else.
func (k *Keys) AccountOf(role Role) string {
	if role == Submitter {
		return k.TenantsAccountKey()
	}
	return k.AccountKey()
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

// tenantService is one service E31 exports to TENANTS, and TENANTS imports
// under the same subject.
type tenantService struct {
	subject string
	// stream: the answer to one request may be several messages.
	stream bool
	// flow: not a service but a flow of messages E31 publishes and TENANTS
	// receives (a stream export, in NATS's words): a request's reply plays
	// no part in it.
	flow bool
}

// tenantServices is everything a submitter may ask of e31: what E31
// exports and TENANTS imports. A submitter's permissions narrow each to its
// own subjects (Permissions); the imports only carry what those permissions
// let through into E31, and every answer back. They are:
//
//   - its requests, cancels and deletions, stored by the E31 stream: the
//     answer is the PubAck;
//   - its queries, answered by the query services;
//   - the object store subjects of its bucket (chunks and metadata): PubAcks;
//   - the JetStream API (the info of its bucket, reading, purging): an API
//     answer, or for a batched direct get several messages;
//   - and, flowing the other way, what its running jobs write, which nodes
//     publish for `e31 logs --follow` (events.LogSubjects).
func tenantServices() []tenantService {
	var out []tenantService
	for _, t := range submitted {
		out = append(out, tenantService{subject: subjectOf(t, "*", "*")})
	}
	return append(out,
		tenantService{subject: wire.UserSubjects("*")},
		tenantService{subject: "$O.>"},
		tenantService{subject: jsAPI + ">", stream: true},
		tenantService{subject: events.LogSubjects("*"), flow: true},
	)
}

// AccountJWT signs the E31 account's JWT: JetStream enabled without limits,
// users signed by the account signing key, no permissions at all for a
// user whose JWT carries none, and the services TENANTS imports, exported
// to it alone (an activation token signed for it). Revocations already in
// the account JWT file are kept.
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
	for _, s := range tenantServices() {
		e := &jwt.Export{Name: s.subject, Subject: jwt.Subject(s.subject), Type: jwt.Service, TokenReq: true,
			ResponseType: jwt.ResponseTypeSingleton}
		if s.stream {
			e.ResponseType = jwt.ResponseTypeStream
		}
		if s.flow {
			e.Type, e.ResponseType = jwt.Stream, ""
		}
		ac.Exports.Add(e)
	}
	t, err := ac.Encode(k.OperatorSigning)
	if err != nil {
		return "", fmt.Errorf("%w: sign the account: %w", ErrKeys, err)
	}
	return t, nil
}

// TenantsJWT signs the TENANTS account's JWT: no JetStream, users signed
// by its own signing key, no permissions for a user whose JWT carries none,
// and the imports of tenantServices from E31. Revocations already in the
// TENANTS JWT file are kept.
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
	for _, s := range tenantServices() {
		act := jwt.NewActivationClaims(pub(k.Tenants))
		act.Name = s.subject
		act.ImportSubject = jwt.Subject(s.subject)
		act.ImportType = jwt.Service
		if s.flow {
			act.ImportType = jwt.Stream
		}
		act.IssuerAccount = pub(k.Account)
		token, err := act.Encode(k.AccountSigning)
		if err != nil {
			return "", fmt.Errorf("%w: sign the activation of %s: %w", ErrKeys, s.subject, err)
		}
		imp := &jwt.Import{Name: s.subject, Subject: jwt.Subject(s.subject), Account: pub(k.Account),
			Token: token, Type: jwt.Service}
		if s.flow {
			imp.Type = jwt.Stream
		}
		ac.Imports.Add(imp)
	}
	t, err := ac.Encode(k.OperatorSigning)
	if err != nil {
		return "", fmt.Errorf("%w: sign the tenants account: %w", ErrKeys, err)
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

// WriteAccountJWTs signs the JWTs of both of e31's accounts, writes each
// to its file, and returns them by account public key, E31's first in
// AccountOrder: what servers are given, preloaded or pushed.
func (k *Keys) WriteAccountJWTs() (map[string]string, error) {
	acc, err := k.WriteAccountJWT()
	if err != nil {
		return nil, err
	}
	ten, err := k.TenantsJWT()
	if err != nil {
		return nil, err
	}
	if err := writeSecret(filepath.Join(k.Dir, TenantsJWTFile), []byte(ten+"\n")); err != nil {
		return nil, err
	}
	return map[string]string{pub(k.Account): acc, pub(k.Tenants): ten}, nil
}

// AccountOrder is the order accounts are given to servers in: E31 (the
// exporter) before TENANTS (its importer).
func (k *Keys) AccountOrder() []string { return []string{pub(k.Account), pub(k.Tenants)} }

// Revoke records in both account JWT files that every credential of user
// (its public key, Creds.UserKey) issued until now is void, whichever
// account signed them: a key names no account, and a revocation in the
// other one is harmless. Servers learn of it when they are given the JWTs
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
	// Accounts maps each account's public key to its JWT: E31, TENANTS
	// and the system account.
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
// with the permissions of its role: a submitter in the TENANTS account,
// signed by its signing key; everyone else in E31.
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
	uc.IssuerAccount = k.AccountOf(id.Role)
	uc.Permissions = perms
	uc.Tags.Add(tagRole + string(id.Role))
	if id.Service != "" {
		uc.Tags.Add(tagService + id.Service)
	}
	if expires > 0 {
		uc.Expires = time.Now().Add(expires).Unix()
	}
	signer := k.AccountSigning
	if id.Role == Submitter {
		signer = k.TenantsSigning
	}
	t, err := uc.Encode(signer)
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
