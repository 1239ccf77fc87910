package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// AccountName is the name of the one account e31 runs in.
const AccountName = "E31"

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
	// AccountJWTFile keeps the account JWT once written, so that what is
	// only in it (revocations) survives the next signing.
	AccountJWTFile = "account.jwt"
)

// keyFiles lists the seeds of a keys directory.
var keyFiles = []string{OperatorKeyFile, OperatorSigningKeyFile, AccountKeyFile, AccountSigningKeyFile, SystemKeyFile, SystemSigningKeyFile}

// ErrKeys is wrapped by errors about a keys directory that cannot be used.
var ErrKeys = errors.New("auth: keys")

// Keys are the operator's, the E31 account's and the system account's keys.
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
	return k, true, nil
}

// LoadKeys reads the keys in dir.
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
	return k, nil
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

// SystemAccountKey is the system account's public key.
func (k *Keys) SystemAccountKey() string { return pub(k.System) }

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

// AccountJWT signs the E31 account's JWT: JetStream enabled without limits,
// users signed by the account signing key, and no permissions at all for a
// user whose JWT carries none. Revocations already in the account JWT file
// are kept.
func (k *Keys) AccountJWT() (string, error) {
	prev, err := k.readAccountJWT()
	if err != nil {
		return "", err
	}
	var revoked jwt.RevocationList
	if prev != nil {
		revoked = prev.Revocations
	}
	return k.signAccount(revoked)
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
	t, err := ac.Encode(k.OperatorSigning)
	if err != nil {
		return "", fmt.Errorf("%w: sign the account: %w", ErrKeys, err)
	}
	return t, nil
}

// readAccountJWT reads the account JWT file, if there is one.
func (k *Keys) readAccountJWT() (*jwt.AccountClaims, error) {
	b, err := os.ReadFile(filepath.Join(k.Dir, AccountJWTFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeys, err)
	}
	ac, err := jwt.DecodeAccountClaims(string(trimSpace(b)))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeys, AccountJWTFile, err)
	}
	if ac.Subject != pub(k.Account) {
		return nil, fmt.Errorf("%w: %s is another account's", ErrKeys, AccountJWTFile)
	}
	return ac, nil
}

// WriteAccountJWT signs the account JWT and writes it to the account JWT
// file, returning it.
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

// Revoke records in the account JWT file that every credential of user
// (its public key, Creds.UserKey) issued until now is void, and returns the
// new account JWT. Servers learn of it when they are given that JWT.
func (k *Keys) Revoke(userKey string) (string, error) {
	if !nkeys.IsValidPublicUserKey(userKey) {
		return "", fmt.Errorf("%w: %q is not a user's public key", ErrKeys, userKey)
	}
	prev, err := k.readAccountJWT()
	if err != nil {
		return "", err
	}
	ac := jwt.NewAccountClaims(pub(k.Account))
	if prev != nil {
		ac.Revocations = prev.Revocations
	}
	ac.RevokeAt(userKey, time.Now())
	t, err := k.signAccount(ac.Revocations)
	if err != nil {
		return "", err
	}
	if err := writeSecret(filepath.Join(k.Dir, AccountJWTFile), []byte(t+"\n")); err != nil {
		return "", err
	}
	return t, nil
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
	// Accounts maps each account's public key to its JWT.
	Accounts map[string]string
}

// Trust signs everything a server needs.
func (k *Keys) Trust() (Trust, error) {
	op, err := k.OperatorJWT()
	if err != nil {
		return Trust{}, err
	}
	acc, err := k.WriteAccountJWT()
	if err != nil {
		return Trust{}, err
	}
	sys, err := k.SystemJWT()
	if err != nil {
		return Trust{}, err
	}
	return Trust{OperatorJWT: op, SystemAccount: pub(k.System),
		Accounts: map[string]string{pub(k.Account): acc, pub(k.System): sys}}, nil
}

// Issue mints credentials for id, valid for expires (0: until revoked),
// with the permissions of its role.
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
	uc.IssuerAccount = pub(k.Account)
	uc.Permissions = perms
	uc.Tags.Add(tagRole + string(id.Role))
	if id.Service != "" {
		uc.Tags.Add(tagService + id.Service)
	}
	if expires > 0 {
		uc.Expires = time.Now().Add(expires).Unix()
	}
	t, err := uc.Encode(k.AccountSigning)
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
