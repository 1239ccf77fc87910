package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The files of e31's TLS authority and of the NATS servers' certificate.
// The authority's key stays in the keys directory with the account keys;
// the rest goes to the servers (the certificate and its key) and to every
// client (the authority's certificate, for E31_TLS_CA).
const (
	// TLSCAFile is the authority's certificate in the keys directory.
	TLSCAFile = "tls-ca.pem"
	// TLSCAKeyFile is the authority's key in the keys directory (0600).
	TLSCAKeyFile = "tls-ca-key.pem"
	// TLSCAOutFile is the authority's certificate handed to every client.
	TLSCAOutFile = "ca.pem"
	// TLSCertFile is the servers' certificate.
	TLSCertFile = "server.pem"
	// TLSCertKeyFile is the servers' certificate's key (0600).
	TLSCertKeyFile = "server-key.pem"
)

// CAValidity is how long the authority is valid. Every client trusts it,
// so replacing it means handing every client a new file: it outlives many
// server certificates.
const CAValidity = 10 * 365 * 24 * time.Hour

// ErrNoHosts is returned by IssueServerCert given no host name or address.
var ErrNoHosts = errors.New("auth: no host name or address")

// CA is a TLS authority: its certificate and the key that signs with it.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// PEM is the authority's certificate, PEM-encoded: what clients trust.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// LoadOrMakeCA returns the TLS authority kept in dir, making it if there
// is none; made says which. An existing one is kept, so that the clients'
// copy stays valid.
func LoadOrMakeCA(dir string, now time.Time) (ca *CA, made bool, err error) {
	certFile, keyFile := filepath.Join(dir, TLSCAFile), filepath.Join(dir, TLSCAKeyFile)
	certPEM, errCert := os.ReadFile(certFile)
	keyPEM, errKey := os.ReadFile(keyFile)
	switch {
	case errCert == nil && errKey == nil:
		ca, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, false, fmt.Errorf("tls authority in %s: %w", dir, err)
		}
		return ca, false, nil
	case !errors.Is(errCert, fs.ErrNotExist) && errCert != nil:
		return nil, false, errCert
	case !errors.Is(errKey, fs.ErrNotExist) && errKey != nil:
		return nil, false, errKey
	case (errCert == nil) != (errKey == nil):
		// Half an authority: making a new one would silently void every
		// client's copy of the old.
		return nil, false, fmt.Errorf("tls authority in %s: %s and %s must both be there or both be missing", dir, TLSCAFile, TLSCAKeyFile)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	sn, err := serial()
	if err != nil {
		return nil, false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "e31 TLS authority", Organization: []string{"e31"}},
		// An hour back, so that a server whose clock is a little behind
		// does not refuse a certificate made just now.
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// It signs server certificates and nothing else: no intermediates.
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, false, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	// The key first: a certificate without its key would be half an
	// authority on the next run.
	if err := WriteFileMode(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, false, err
	}
	if err := WriteFileMode(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, false, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, false, err
	}
	return &CA{Cert: cert, Key: priv}, true, nil
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("not a certificate authority and its key")
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// IssueServerCert signs a certificate for every host (names and IP
// addresses) with a new key, valid for valid from now (never past the
// authority). It is good for both ends of a TLS connection, because a NATS
// server presents the same certificate when it dials a route as when it
// answers one. Given no host, it returns ErrNoHosts.
func (ca *CA) IssueServerCert(hosts []string, now time.Time, valid time.Duration) (certPEM, keyPEM []byte, err error) {
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(h); {
		case h == "":
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if len(tmpl.DNSNames)+len(tmpl.IPAddresses) == 0 {
		return nil, nil, ErrNoHosts
	}
	tmpl.Subject = pkix.Name{CommonName: "e31 NATS server", Organization: []string{"e31"}}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		// A certificate is worth nothing past its authority.
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &priv.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteServerTLS writes into out what the servers and clients need of the
// authority and a server certificate: TLSCAOutFile for every client,
// TLSCertFile and TLSCertKeyFile (0600) for the servers only.
func WriteServerTLS(out string, ca *CA, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode fs.FileMode
	}{
		{TLSCAOutFile, ca.PEM(), 0o644},
		{TLSCertFile, certPEM, 0o644},
		{TLSCertKeyFile, keyPEM, 0o600},
	} {
		if err := WriteFileMode(filepath.Join(out, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// WriteFileMode writes data to name with exactly mode, also when the file
// was there before with another.
func WriteFileMode(name string, data []byte, mode fs.FileMode) error {
	if err := os.WriteFile(name, data, mode); err != nil {
		return err
	}
	return os.Chmod(name, mode)
}

// serial is a random 128-bit certificate serial number, as RFC 5280 asks:
// unique per authority without keeping a counter.
func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
