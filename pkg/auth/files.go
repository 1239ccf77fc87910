package auth

// What `e31 creds` and `e31 serve` do with the files of a deployment's
// keys and credentials, in one call each.

// ReadIdentity reads the credentials in file and the identity they name:
// ErrNotE31 for credentials e31 did not make.
func ReadIdentity(file string) (Identity, error) {
	creds, err := ReadCreds(file)
	if err != nil {
		return Identity{}, err
	}
	return creds.Identity()
}

// RevokeIn records, in the account JWTs of the keys in dir, that every
// credentials issued so far to user, or to the user of the credentials in
// file (give one of the two), are void. It returns the user's key; the
// servers learn of it when given the new JWTs (Push).
func RevokeIn(dir, file, user string) (string, error) {
	if file != "" {
		creds, err := ReadCreds(file)
		if err != nil {
			return "", err
		}
		if user, err = creds.UserKey(); err != nil {
			return "", err
		}
	}
	keys, err := LoadKeys(dir)
	if err != nil {
		return "", err
	}
	return user, keys.Revoke(user)
}
